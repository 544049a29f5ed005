"""One epoch for every value of a trial: the objectives' epoch, the constraints' fallbacks, and
Optuna's constraint convention, as tables."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pytest

from dvt_hpo.results.reduction import (
    UNKNOWN_VIOLATION,
    choose_epoch,
    constraint_value,
    reduce_trial,
)
from dvt_hpo.spec.model import ConstraintSpec

NAN = math.nan
# f1 peaks at epoch 1; latency is lowest at epoch 2; size is reported at epoch 0 only.
HISTORY: list[tuple[int, Mapping[str, float]]] = [
    (0, {"f1": 0.5, "lat": 9.0, "size": 100.0}),
    (1, {"f1": 0.9, "lat": 7.0}),
    (2, {"f1": 0.8, "lat": 3.0}),
]


@pytest.mark.parametrize(
    ("names", "direction", "reduce", "step"),
    [
        (("f1", "lat"), "maximize", "best", 1),  # the epoch best on the FIRST objective
        (("f1", "lat"), "maximize", "last", 2),
        (("lat", "f1"), "minimize", "best", 2),
        (("f1",), "maximize", "best", 1),
        (("f1",), "minimize", "best", 0),
        (("lat",), "minimize", "last", 2),
        (("size", "f1"), "minimize", "last", 0),  # the last epoch with EVERY objective
        (("nope",), "maximize", "best", None),
    ],
)
def test_the_chosen_epoch(
    names: Sequence[str], direction: str, reduce: str, step: int | None
) -> None:
    chosen = choose_epoch(HISTORY, names, direction, reduce)
    assert (None if chosen is None else HISTORY[chosen][0]) == step


def test_values_never_mix_epochs() -> None:
    reduced = reduce_trial(HISTORY, ("f1", "lat"), "maximize", "best")
    # The best f1 (0.9, epoch 1) comes with ITS latency (7.0), not the best one (3.0).
    assert (reduced.step, reduced.values, reduced.failure) == (1, (0.9, 7.0), None)


def test_a_tie_keeps_the_earliest_epoch() -> None:
    history = [(0, {"a": 1.0, "b": 5.0}), (1, {"a": 1.0, "b": 1.0})]
    assert reduce_trial(history, ("a", "b"), "maximize", "best").values == (1.0, 5.0)


def test_non_finite_epochs_are_skipped_and_a_nan_only_objective_diverged() -> None:
    history = [(0, {"a": 0.2, "b": 1.0}), (1, {"a": NAN, "b": 0.5}), (2, {"a": 0.1, "b": NAN})]
    assert reduce_trial(history, ("a", "b"), "maximize", "last").values == (0.2, 1.0)
    diverged = reduce_trial([(0, {"a": 1.0, "b": NAN})], ("a", "b"), "maximize", "best")
    assert diverged.diverged is not None and diverged.diverged[:2] == (0, "b")


@pytest.mark.parametrize(
    ("history", "names", "contains"),
    [
        (
            [(0, {"a": 1.0})],
            ("a", "b"),
            "objective 'b' was never reported; the trial reported ['a']",
        ),
        ([], ("a",), "objective.metric 'a' was never reported; the trial reported no metrics"),
        # A custom trainer's names are not known ahead: the first trial names the close one.
        (
            [(0, {"macro_f1": 0.5, "loss": 1.0})],
            ("macro_f2",),
            "the trial reported ['loss', 'macro_f1']; did you mean 'macro_f1'?",
        ),
        (
            [(0, {"a": 1.0}), (1, {"b": 2.0})],
            ("a", "b"),
            "never all reported (as finite numbers) in the same epoch",
        ),
    ],
)
def test_why_no_epoch(
    history: list[tuple[int, Mapping[str, float]]], names: Sequence[str], contains: str
) -> None:
    reduced = reduce_trial(history, names, "maximize", "best")
    assert reduced.failure is not None and contains in reduced.failure
    assert reduced.values == ()


@pytest.mark.parametrize(
    ("constraint", "value", "expected"),
    [
        (ConstraintSpec("m", max=10.0), 12.0, 2.0),
        (ConstraintSpec("m", max=10.0), 10.0, 0.0),  # on the bound: feasible
        (ConstraintSpec("m", max=10.0), 4.0, -6.0),
        (ConstraintSpec("m", min=5.0), 4.0, 1.0),
        (ConstraintSpec("m", min=5.0), 9.0, -4.0),
        (ConstraintSpec("m", min=0.0, max=1.0), 0.5, -0.5),
        (ConstraintSpec("m", min=0.0, max=1.0), 3.0, 2.0),
        (ConstraintSpec("m", min=0.0, max=1.0), -0.25, 0.25),
    ],
)
def test_optuna_constraint_convention(
    constraint: ConstraintSpec, value: float, expected: float
) -> None:
    assert constraint_value(constraint, value) == pytest.approx(expected)


def test_constraints_come_from_the_chosen_epoch_then_the_last_reporting_one() -> None:
    history = [(0, {"f1": 0.5, "mem": 100.0, "size": 7.0}), (1, {"f1": 0.9, "mem": 300.0})]
    reduced = reduce_trial(
        history,
        ("f1",),
        "maximize",
        "best",
        (ConstraintSpec("mem", max=200.0), ConstraintSpec("size", max=5.0)),
    )
    # mem from epoch 1 (the chosen one), size from epoch 0 (the last that reported it).
    assert reduced.constraints == (100.0, 2.0)


def test_constraint_from_the_final_metrics_and_never_reported() -> None:
    history = [(0, {"f1": 0.5})]
    size = (ConstraintSpec("size", max=5.0),)
    from_final = reduce_trial(history, ("f1",), "maximize", "best", size, {"size": 1.0})
    assert from_final.constraints == (-4.0,)
    missing = reduce_trial(history, ("f1",), "maximize", "best", size, {"f1": 0.5})
    assert missing.failure == (
        "constraint metric 'size' was never reported as a finite number; the trial reported ['f1']"
    )


def test_a_pruned_trial_reads_constraints_only() -> None:
    history = [(0, {"f1": 0.5, "size": 9.0})]
    constraints = (ConstraintSpec("size", max=5.0), ConstraintSpec("mem", max=1.0))
    reduced = reduce_trial(history, ("f1",), "maximize", "best", constraints, need_objectives=False)
    assert reduced.values == () and reduced.failure is None
    assert reduced.constraints == (4.0, UNKNOWN_VIOLATION)
