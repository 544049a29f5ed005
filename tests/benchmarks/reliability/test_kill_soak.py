"""benchmarks/reliability/kill_soak.py, two short rounds: workers SIGKILLed at random instants on one
PostgreSQL study lose nothing (the full soak runs 50 rounds; see docs/recovery.md)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.processes


def test_two_soak_rounds_lose_nothing(postgres_url: str) -> None:
    soak = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "benchmarks" / "reliability" / "kill_soak.py"),
            *("--rounds", "2", "--workers", "3", "--trials", "8", "--kills", "2"),
            *("--trial-s", "1", "--kill-window-s", "4", "--seed", "22"),
            *("--postgres", postgres_url),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert soak.returncode == 0, soak.stdout + soak.stderr
    assert "2/2 rounds lost nothing; 4 workers killed" in soak.stdout, soak.stdout


def test_two_soak_rounds_of_resumable_trials_lose_nothing(postgres_url: str) -> None:
    """trials.resume, trials saved after their last epoch with a final step; one round kills
    whole nodes, one only orchestrators."""
    soak = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "benchmarks" / "reliability" / "kill_soak.py"),
            *("--rounds", "2", "--workers", "3", "--trials", "8", "--kills", "2"),
            *("--trial-s", "1", "--kill-window-s", "4", "--seed", "22"),
            *("--resume", "--kind", "both", "--postgres", postgres_url),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert soak.returncode == 0, soak.stdout + soak.stderr
    assert "2/2 rounds lost nothing; 4 workers killed" in soak.stdout, soak.stdout
    assert "0 epochs trained twice, 0 values differing" in soak.stdout, soak.stdout
