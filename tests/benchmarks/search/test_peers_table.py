"""benchmarks/search/peers_table.py: which result files become rows of the peers' table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks" / "search"))

try:
    import peers_table as pt
except FileNotFoundError as exc:  # the surrogate's files, as in test_search_efficiency
    pytest.skip(str(exc), allow_module_level=True)
import search_efficiency as se  # noqa: E402


def _save(folder: Path, cell: str, task: str, seed: int) -> None:
    trial = se.Trial(0, "COMPLETE", 52, 0.9, 1.0)
    se.save(folder, se.StudyResult(cell, task, seed, 1560, 1.0, 0, (trial,), parallel=4))


def test_a_folder_of_dvt_hpo_runs_gives_only_its_row_cells(tmp_path: Path) -> None:
    # A parallel-runs folder also holds candidates (successive halving) beside the rows.
    for cell in ("default", "tpe+none", "tpe-uni+sha-m3r3"):
        for seed in (0, 1, 5):
            _save(tmp_path, cell, "3945", seed)
    _save(tmp_path, "default", "126026", 0)

    rows = pt.load_cells(tmp_path, {"3945"}, {0, 1}, pt.DVT_CELLS)
    assert sorted((r.cell, r.seed) for r in rows) == [
        ("default", 0),
        ("default", 1),
        ("tpe+none", 0),
        ("tpe+none", 1),
    ]
    every = pt.load_cells(tmp_path, {"3945", "126026"}, {0})
    assert sorted(r.cell for r in every) == ["default", "default", "tpe+none", "tpe-uni+sha-m3r3"]
