"""benchmarks/overheads/sampler_scale.py, small: the default sampler and TPE on a stored study,
through real ``dvt-hpo run`` workers on PostgreSQL and in process; every row is printed with its
ratio to TPE, and no trial the workers ran is lost."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.processes

SCRIPT = REPO_ROOT / "benchmarks" / "overheads" / "sampler_scale.py"


def _rows(stdout: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in stdout.splitlines()
        if line.startswith("| ") and not line.startswith("| stored") and "---" not in line
    ]


def test_the_default_and_tpe_on_a_stored_study_one_worker_and_two(
    postgres_url: str, unique_name: str
) -> None:
    run = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            *("--postgres", postgres_url, "--study", unique_name, "--stored", "40"),
            *("--samplers", "default,tpe", "--window", "3"),
            *("--workers", "2", "--per-worker", "2", "--workers-stored", "40"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    rows = _rows(run.stdout)
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("40", "1", "mf_gp (the default)"),
        ("40", "1", "tpe"),
        ("40", "2", "mf_gp (the default)"),
        ("40", "2", "tpe"),
    ]
    # Complete trials; two workers racing for the last trial may close one more as over budget.
    assert [r[3].split(" (")[1] for r in rows] == ["3)", "3)", "4)", "4)"]
    assert [r[5] for r in rows][1::2] == ["1.00x", "1.00x"]


def test_the_samplers_asks_alone_in_process() -> None:
    run = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--in-process",
            "--stored",
            "30",
            "--samplers",
            "default,tpe",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert [(r[0], r[1]) for r in _rows(run.stdout)] == [
        ("30", "mf_gp (the default)"),
        ("30", "tpe"),
    ]
