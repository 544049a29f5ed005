"""benchmarks/overheads/trial_cost.py, one short round: every phase of a no-op trial's start-to-start is
measured, cold and warm (the probe follows the trial process's code: a renamed step fails here),
and the phases are in order (the script checks each trial's marks)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.processes

SCRIPT = REPO_ROOT / "benchmarks" / "overheads" / "trial_cost.py"


def _phases() -> dict[bool, list[tuple[str, str, str]]]:
    spec = importlib.util.spec_from_file_location("trial_cost", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.WARM_OR_COLD


def test_one_round_times_every_phase_cold_and_warm() -> None:
    run = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            *("--trials", "5", "--rounds", "1", "--passes", "1"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    rows = {
        cells[0]: cells[1:]
        for line in run.stdout.splitlines()
        if line.startswith("| ")
        and len(cells := [c.strip() for c in line.strip("|").split("|")]) == 3
    }
    for warm, phases in _phases().items():
        for label, _, _ in phases:
            value = rows[label][1 if warm else 0]
            assert float(value) >= 0, (label, run.stdout)
    assert float(rows["`python -c pass` (the floor)"][0]) > 0
    assert "x" in rows["start-to-start / `python -c pass`"][1]
    assert "orchestrator's SQL statements per trial" in run.stdout
