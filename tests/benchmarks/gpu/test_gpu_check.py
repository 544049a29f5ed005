"""benchmarks/gpu/gpu_check.py without a GPU: its CPU part runs through the real orchestrator and
lists what it skipped; its GPU study files are valid for one and two GPUs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu" / "gpu_check.py"


def run_script(*args: str, cwd: Path) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )
    return done.returncode, (done.stdout + done.stderr).splitlines()


def table(lines: list[str]) -> dict[str, tuple[str, str, str]]:
    """``{check: (setting, result, status)}`` from the printed table."""
    rows = {}
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 4 and cells[0] not in ("check", "---"):
            rows[cells[0]] = (cells[1], cells[2], cells[3])
    return rows


def test_the_cpu_part_runs_and_lists_what_it_skipped(tmp_path: Path) -> None:
    code, lines = run_script("--cpu", "--workdir", str(tmp_path), cwd=tmp_path)
    rows = table(lines)
    assert code == 0, "\n".join(lines)
    assert rows["bf16 training"][2] == "ok" and "COMPLETE" in rows["bf16 training"][1]
    torchrun = rows["torchrun trial on gloo"]
    assert torchrun[0] == "world size 1" and torchrun[2] == "ok"
    assert torchrun[1].startswith("PRUNED at step 0 after 1 report(s)")
    assert rows["out of memory: the trial"][1].startswith("FAIL after")
    assert "MemoryError" in rows["out of memory: the trial"][1]
    for check in ("the trial", "its neighbour", "next trial"):
        assert rows[f"out of memory: {check}"][2] == "ok", rows
    for skipped in ("batch size by memory", "fp16 training", "packing 1, 2, 4 trials per GPU"):
        assert rows[skipped][1].startswith("skipped:"), rows
    # Every number came from a study database the script wrote.
    assert {p.name for p in tmp_path.glob("*.db")} == {
        "amp.db",
        "collective.db",
        "out-of-memory.db",
    }


@pytest.mark.parametrize("n_gpus", [1, 2])
def test_the_gpu_study_files_are_valid(tmp_path: Path, n_gpus: int) -> None:
    code, lines = run_script(
        "--validate-only", str(n_gpus), "--workdir", str(tmp_path), cwd=tmp_path
    )
    rows = table(lines)
    assert code == 0, "\n".join(lines)
    files = {check for check in rows if check.startswith("study file ")}
    expected = {"bs-memory", "bs-exact", "amp", "collective", "packed-1", "packed-2"}
    expected |= {"packed-4", "out-of-memory"} | ({"ddp-trainer"} if n_gpus == 2 else set())
    assert files == {f"study file {name}" for name in expected}
    assert all(rows[f][2] == "ok" for f in files), rows
    assert rows["study file packed-4"][1] == (
        "4 trials at a time, 4 per GPU (GPU 0: 4), each with 1/4 of its GPU's memory"
    )
    assert not list(tmp_path.glob("*.db"))  # validate writes nothing
