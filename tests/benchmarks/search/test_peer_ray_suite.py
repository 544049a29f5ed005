"""benchmarks/search/peer_ray_suite.py's simulation, with a scripted tool in place of Ray Tune's
scheduler (Ray is not installed beside the core suite): a stopped trial is a pruned row and the
next trial starts, a trial at the family's last step completes with its value, the budget cuts
the trial in progress, and four at a time their steps interleave."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "benchmarks" / "search"), str(ROOT / "benchmarks")]

from peer_ray_suite import simulate  # noqa: E402
from peer_syne_suite import Stretches, params_of  # noqa: E402

STEPS = 10


class Scripted:
    """Stops trial k after ``stops[k]`` steps (ASHA's rule; ``STEPS`` = its max_t), and keeps
    what it is told."""

    def __init__(self, stops: list[int]) -> None:
        self.stops = stops
        self.started: list[str] = []
        self.told: list[tuple[str, int, float]] = []

    def start(self, trial: str) -> dict[str, Any]:
        self.started.append(trial)
        return {"k": len(self.started) - 1}

    def result(self, trial: str, step: int, value: float) -> bool:
        self.told.append((trial, step, value))
        k = self.started.index(trial)
        return step >= self.stops[min(k, len(self.stops) - 1)]


def curve(config: dict[str, Any]) -> np.ndarray:
    """Trial k's value at step s: k + s / 100 (each value says whose step it is)."""
    return config["k"] + np.arange(1, STEPS + 1) / 100


def test_stopped_trials_are_pruned_and_a_full_one_completes() -> None:
    tool = Scripted([1, 4, STEPS, 1, 1, 3])
    log = Stretches(budget=18, steps=STEPS)
    started = simulate(tool, curve, 1, log)
    assert log.exhausted and log.spent == 18
    assert log.all_rows() == [
        [0, "PRUNED", 1, None],
        [1, "PRUNED", 4, None],
        [2, "COMPLETE", 10, 2.10],
        [3, "PRUNED", 1, None],
        [4, "PRUNED", 1, None],
        [5, "RUNNING", 1, None],  # its step is counted, then the budget ends the study
    ]
    assert started == 6
    assert len(tool.told) == 18  # every counted step was told, none past the budget


def test_the_budget_cuts_the_trial_in_progress() -> None:
    log = Stretches(budget=13, steps=STEPS)
    simulate(Scripted([1, STEPS]), curve, 1, log)
    assert log.all_rows() == [
        [0, "PRUNED", 1, None],
        [1, "COMPLETE", 10, 1.10],
        [2, "RUNNING", 2, None],
    ]


def test_four_at_a_time_interleave_their_steps() -> None:
    tool = Scripted([2, 1, STEPS, 3, 1, 1])
    log = Stretches(budget=12, steps=STEPS)
    simulate(tool, curve, 4, log)
    # Step 1 of the four, then step 2 of the three still going and step 1 of t00004, started in
    # t00001's place when ASHA stopped it: ties in the order the steps were scheduled.
    assert [t[:2] for t in tool.told[:4]] == [(f"t0000{k}", 1) for k in range(4)]
    assert [t[:2] for t in tool.told[4:8]] == [
        ("t00000", 2),
        ("t00004", 1),
        ("t00002", 2),
        ("t00003", 2),
    ]
    assert log.spent == 12


def test_a_conditional_dimension_is_dropped_where_it_does_not_hold() -> None:
    space = [
        {"name": "optimizer", "kind": "categorical", "choices": ["adam", "sgd"]},
        {
            "name": "momentum",
            "kind": "float",
            "low": 0.0,
            "high": 0.99,
            "when": {"optimizer": "sgd"},
        },
    ]
    assert params_of(space, {"optimizer": "adam", "momentum": 0.5}) == {"optimizer": "adam"}
    assert params_of(space, {"optimizer": "sgd", "momentum": 0.5}) == {
        "optimizer": "sgd",
        "momentum": 0.5,
    }
