"""benchmarks/search/result_files.py: a grid packed into one file reads back as its folder did,
the same studies give the same bytes, and every result saved says what produced it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks" / "search"))

import result_files  # noqa: E402

try:
    import peers_table as pt
    import search_efficiency as se
except FileNotFoundError as exc:  # the surrogate's files (benchmarks/search/data) missing
    pytest.skip(str(exc), allow_module_level=True)


def _result(cell: str, task: str, seed: int) -> se.StudyResult:
    trials = (se.Trial(0, "COMPLETE", 52, 0.9, 1.0), se.Trial(1, "PRUNED", 3, None, 0.1))
    return se.StudyResult(cell, task, seed, 1560, 1.0, 0, trials, engine="replay")


def _grid(folder: Path) -> None:
    for cell in ("default", "tpe+none"):
        for task in ("3945", "126026"):
            for seed in (0, 1):
                se.save(folder, _result(cell, task, seed))


def test_a_packed_grid_reads_back_as_its_folder_and_packs_to_the_same_bytes(
    tmp_path: Path,
) -> None:
    _grid(tmp_path / "grid")
    packed = tmp_path / "grid.jsonl.gz"
    assert result_files.pack(tmp_path / "grid", packed) == 8
    assert result_files.read(packed) == result_files.read(tmp_path / "grid")
    assert list(result_files.read(packed, "tpe+none/*")) == [
        "tpe+none/126026-0.json",
        "tpe+none/126026-1.json",
        "tpe+none/3945-0.json",
        "tpe+none/3945-1.json",
    ]
    again = tmp_path / "again.jsonl.gz"
    result_files.pack(tmp_path / "grid", again)
    assert again.read_bytes() == packed.read_bytes()
    result_files.unpack(packed, tmp_path / "unpacked")
    assert result_files.read(tmp_path / "unpacked") == result_files.read(tmp_path / "grid")

    folder_runs = se.load_cells(tmp_path / "grid", ["tpe+none", "default"])
    assert se.load_cells(packed, ["tpe+none", "default"]) == folder_runs
    assert [r.cell for r in folder_runs] == ["tpe+none"] * 4 + ["default"] * 4
    rows = pt.load_cells(packed, {"3945"}, {1}, ("default",))
    assert [(r.cell, r.task, r.seed) for r in rows] == [("default", "3945", 1)]


def test_a_saved_result_records_the_resolved_sampler_and_pruner_and_the_commit(
    tmp_path: Path,
) -> None:
    se.save(tmp_path, _result("default", "3945", 7))
    se.save(tmp_path, _result("tpe+median", "3945", 7))
    default = json.loads((tmp_path / "default" / "3945-7.json").read_text())
    # What "default" meant when it ran: a sampler and a pruner kind, never "default".
    assert default["sampler"]["kind"] not in ("", "default")
    assert default["pruner"]["kind"] not in ("", "default")
    assert default["sampler"]["seed"] == 7
    named = json.loads((tmp_path / "tpe+median" / "3945-7.json").read_text())
    assert named["sampler"] == {"kind": "tpe", "seed": 7}
    assert named["pruner"]["kind"] == "median"
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    if head.returncode == 0:
        assert default["commit"].split("+")[0] == head.stdout.strip()
    else:  # an exported tree, not a checkout
        assert default["commit"] == "unknown"
    # Results from before they were recorded still load.
    old = dict(default)
    for key in ("sampler", "pruner", "commit"):
        old.pop(key)
    assert se.from_json(old).commit == ""


def test_a_packed_grid_is_read_only(tmp_path: Path) -> None:
    packed = tmp_path / "grid.jsonl.gz"
    with pytest.raises(RuntimeError, match="packed grid, read-only"):
        se.save(packed, _result("default", "3945", 0))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "search" / "search_efficiency.py")]
        + ["--results", str(packed), "--cells", "tpe+none", "--tasks", "3945", "--seeds", "1"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "packed grid, read-only: add --report-only" in proc.stderr


def test_the_kept_peer_results_are_packed_and_name_their_studies() -> None:
    rows = result_files.read(ROOT / "benchmarks" / "search" / "results" / "peers.jsonl.gz")
    assert len(rows) == 240
    for name, raw in rows.items():
        assert name == f"{raw['cell']}/{raw['task']}-{raw['seed']}.json"
