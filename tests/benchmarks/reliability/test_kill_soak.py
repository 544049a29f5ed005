"""benchmarks/reliability/kill_soak.py, two short rounds: workers SIGKILLed at random instants on one
PostgreSQL study lose nothing (the full soak runs 50 rounds; see docs/recovery.md); and its count
of epochs trained twice, from the trainer's own log, on chains made by hand."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "reliability" / "kill_soak.py"


def _soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kill_soak", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("kill_soak", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _trial(number: int, state: str, history: list[int] | None = None) -> Any:
    attrs = {"retry_history": history} if history else {}
    return SimpleNamespace(number=number, state=SimpleNamespace(name=state), system_attrs=attrs)


# Trial 0 killed after it saved epochs 0-2 (4 epochs a trial), trial 1 uninterrupted, trial 2
# the copy of trial 0.
CHAIN = [_trial(0, "FAIL"), _trial(1, "COMPLETE"), _trial(2, "COMPLETE", [0])]


@pytest.mark.parametrize(
    ("copy", "twice"),
    [
        ([3], 0),  # resumed after the last saved epoch
        ([2, 3], 0),  # the epoch in progress at the kill (trained, not saved) redone
        ([0, 1, 2, 3], 2),  # restarted from epoch 0 however it said it resumed
        ([3, 3], 1),  # an epoch trained twice by the copy itself
    ],
)
def test_epochs_trained_twice_are_counted_from_the_trainers_log(
    tmp_path: Path, copy: list[int], twice: int
) -> None:
    soak = _soak()
    log = tmp_path / soak.EPOCH_LOG
    lines = [(0, e) for e in (0, 1, 2)] + [(1, e) for e in range(4)] + [(2, e) for e in copy]
    log.write_text("".join(f"{n} {e}\n" for n, e in lines))
    found = soak.trained_twice(CHAIN, soak.trained_epochs(log), 4)
    assert found.twice == twice, found.problems
    assert bool(found.problems) == bool(twice), found.problems


def test_a_copy_resumed_past_its_last_epoch_trains_nothing_and_passes() -> None:
    soak = _soak()
    trained = {0: [0, 1, 2, 3], 1: [0, 1, 2, 3]}  # trial 0 killed in its final step
    found = soak.trained_twice(CHAIN, trained, 4)
    assert (found.twice, found.problems) == (0, [])


def test_a_completed_chain_with_an_epoch_never_trained_is_a_problem() -> None:
    soak = _soak()
    # A copy that skipped epoch 2, or a log the trainer never wrote: either fails the round.
    found = soak.trained_twice(CHAIN, {0: [0, 1], 1: [0, 1, 2, 3], 2: [3]}, 4)
    assert found.problems == ["chain 0 completed, its epochs [2] never trained"]
    assert soak.trained_twice(CHAIN, {}, 4).problems == [
        "chain 0 completed, its epochs [0, 1, 2, 3] never trained",
        "chain 1 completed, its epochs [0, 1, 2, 3] never trained",
    ]


@pytest.mark.processes
def test_two_soak_rounds_lose_nothing(postgres_url: str) -> None:
    soak = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
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


@pytest.mark.processes
def test_two_soak_rounds_of_resumable_trials_lose_nothing(postgres_url: str) -> None:
    """trials.resume, trials saved after their last epoch with a final step; one round kills
    whole nodes, one only orchestrators. The epochs trained twice are counted from the
    trainer's own log (a copy restarted from epoch 0 fails the round, and so does a log the
    trainer never wrote: a completed chain's epochs must all be in it)."""
    soak = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
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
    for kind in ("node", "orchestrator"):
        assert (
            f"  {kind}: 1/1 rounds held, 2 kills, 0 trials lost (8 asked), 0 epochs trained "
            "twice, 0 values differing" in soak.stdout
        ), soak.stdout
