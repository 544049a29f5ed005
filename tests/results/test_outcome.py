"""A trial's outcome from what it left: the pure classify(), as a table, without processes."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from dvt_hpo.results.outcome import Flags, Limits, Objective, Outcome, classify, reduce_history
from dvt_hpo.spec.model import ConstraintSpec
from dvt_hpo.wire.result import TrialResult

OBJ = Objective("score", "maximize", "best")
LIMITS = Limits(timeout_s=60, memory_limit=1 << 30)
OK = TrialResult("ok", metrics={"score": 0.4}, time_unix=10.0)
STOPPED = TrialResult("stopped", signal="SIGTERM")
HISTORY = [(0, {"score": 0.2}), (1, {"score": 0.9}), (2, {"score": 0.4})]
INTERRUPTED = Flags(interrupted=True)
TIMED_OUT = Flags(timed_out=True)


def error(rank: int, exc_type: str, message: str, t: float, oom: bool = False) -> TrialResult:
    return TrialResult(
        "error",
        rank=rank,
        exc_type=exc_type,
        message=message,
        traceback=f"Traceback ... {exc_type}",
        out_of_memory=oom,
        time_unix=t,
    )


CASES: list[tuple[str, Any, int | None, Flags, list[Any], tuple[str, str, float | None, bool]]] = [
    # (name, result, exit, flags, rank_errors, (state, status, value, retry))
    ("ok", OK, 0, Flags(), [], ("COMPLETE", "ok", 0.9, False)),
    # The defect: a result written just before Ctrl-C / the timeout must win over the flags.
    ("ok then interrupted", OK, 0, INTERRUPTED, [], ("COMPLETE", "ok", 0.9, False)),
    ("ok then timed out", OK, 0, TIMED_OUT, [], ("COMPLETE", "ok", 0.9, False)),
    ("ok, then killed by our stop", OK, -9, TIMED_OUT, [], ("COMPLETE", "ok", 0.9, False)),
    ("pruned", None, 3, Flags(pruned_step=1), [], ("PRUNED", "pruned", None, False)),
    ("pruned beats interrupted", None, -15, Flags(pruned_step=1, interrupted=True), [],
     ("PRUNED", "pruned", None, False)),
    ("interrupted, no result", None, -15, INTERRUPTED, [], ("FAIL", "interrupted", None, True)),
    ("interrupted, stopped result", STOPPED, 143, INTERRUPTED, [],
     ("FAIL", "interrupted", None, True)),
    ("timed out", STOPPED, 143, TIMED_OUT, [], ("FAIL", "timeout", None, False)),
    ("raised", error(0, "ValueError", "bad", 1.0), 1, Flags(), [], ("FAIL", "failed", None, False)),
    ("segfault", None, -11, Flags(), [], ("FAIL", "failed", None, False)),
    ("exit 0 without result", None, 0, Flags(), [], ("FAIL", "failed", None, False)),
    ("ok but exit 5, not stopped by us", OK, 5, Flags(), [], ("FAIL", "failed", None, False)),
    ("ok chief, failed rank", OK, 1, Flags(), [error(1, "RuntimeError", "r1", 2.0)],
     ("FAIL", "failed", None, False)),
    ("protocol mismatch", None, -9, Flags(protocol_error="speaks protocol 1"), [],
     ("FAIL", "failed", None, False)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("result", "exit_status", "flags", "rank_errors", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_classify(
    result: Any,
    exit_status: int | None,
    flags: Flags,
    rank_errors: list[Any],
    expected: tuple[str, str, float | None, bool],
) -> None:
    outcome = classify(
        result,
        exit_status,
        flags,
        objective=OBJ,
        history=HISTORY,
        rank_errors=rank_errors,
        limits=LIMITS,
    )
    assert (outcome.state, outcome.status, outcome.value, outcome.retry) == expected
    if outcome.state == "FAIL":
        assert outcome.reason


@pytest.mark.parametrize(
    ("flags", "exit_status", "result", "reason"),
    [
        (INTERRUPTED, -15, None, "interrupted (the study was stopped)"),
        (TIMED_OUT, -15, None, "timed out after trials.timeout_s=60 s"),
        (Flags(), -11, None, "trial process ended with killed by signal SIGSEGV (-11)"),
        (Flags(), 0, None, "trial process exited without writing a result"),
        (Flags(), 1, error(0, "ValueError", "bad lr", 1.0), "ValueError: bad lr"),
        (Flags(protocol_error="the trial speaks 1"), 1, None, "the trial speaks 1"),
    ],
)
def test_reasons(flags: Flags, exit_status: int, result: Any, reason: str) -> None:
    outcome = classify(result, exit_status, flags, objective=OBJ, limits=LIMITS)
    assert outcome.reason == reason


def test_a_failed_command_is_its_own_reason() -> None:
    result = dataclasses.replace(
        error(0, "dvt_hpo.exceptions.CommandFailed", "command exited with 3: X", 1.0),
        reason="command exited with 3: ValueError: bad",
    )
    outcome = classify(result, 1, Flags(), objective=OBJ)
    assert outcome.reason == "command exited with 3: ValueError: bad"


def test_the_earliest_rank_error_is_the_cause() -> None:
    chief = error(0, "RuntimeError", "peer closed", 5.0)
    rank1 = error(1, "ArithmeticError", "rank one broke", 3.0)
    outcome = classify(chief, 1, Flags(), objective=OBJ, rank_errors=[rank1])
    assert outcome.reason == "rank 1: ArithmeticError: rank one broke"
    assert outcome.traceback == "Traceback ... ArithmeticError"


def test_out_of_memory_is_taken_from_the_worker_not_from_the_message() -> None:
    # The worker classified it (is_out_of_memory on the live exception): trusted as is.
    said_oom = error(0, "RuntimeError", "something odd", 1.0, oom=True)
    outcome = classify(said_oom, 1, Flags(), objective=OBJ, limits=LIMITS)
    assert outcome.reason == f"RuntimeError: something odd (trials.memory_limit={1 << 30} bytes)"
    # A message that looks like OOM but was not classified so is not re-guessed here.
    looks_oom = error(0, "RuntimeError", "CUDA out of memory", 1.0, oom=False)
    outcome = classify(looks_oom, 1, Flags(), objective=OBJ, limits=LIMITS)
    assert outcome.reason == "RuntimeError: CUDA out of memory"
    # Without a memory limit there is no limit to name.
    outcome = classify(said_oom, 1, Flags(), objective=OBJ)
    assert outcome.reason == "RuntimeError: something odd"


def test_a_metric_never_reported_fails_listing_what_was() -> None:
    outcome = classify(OK, 0, Flags(), objective=Objective("macro_f1", "maximize"), history=HISTORY)
    assert outcome == Outcome(
        "FAIL",
        "failed",
        reason="objective.metric 'macro_f1' was never reported; the trial reported ['score']",
    )


def test_without_reports_the_returned_metrics_are_the_history() -> None:
    outcome = classify(OK, 0, Flags(), objective=OBJ)
    assert (outcome.state, outcome.value) == ("COMPLETE", 0.4)


def test_reduce_history_best_last_and_nan() -> None:
    history = [(0, {"m": 0.5}), (1, {"m": math.nan}), (2, {"m": 0.7}), (3, {"m": 0.6})]
    assert reduce_history(history, "m", "maximize", "best") == 0.7
    assert reduce_history(history, "m", "minimize", "best") == 0.5
    assert reduce_history(history, "m", "maximize", "last") == 0.6
    assert reduce_history(history, "other", "maximize", "best") is None


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_diverged_objective_fails_naming_the_step_and_value(bad: float) -> None:
    # The trial stopped at its first non-finite report; its pruned result does not matter.
    outcome = classify(
        TrialResult("pruned", step=2),
        3,
        Flags(diverged=(2, bad)),
        objective=Objective("val_mse", "minimize"),
        history=[(0, {"val_mse": 1.0}), (1, {"val_mse": 2.0}), (2, {"val_mse": bad})],
    )
    assert (outcome.state, outcome.retry) == ("FAIL", False)
    assert outcome.reason == f"diverged at step 2 (val_mse={bad})"


def test_an_objective_that_was_nan_at_every_step_is_diverged_not_never_reported() -> None:
    ok = TrialResult("ok", metrics={"val_mse": math.nan})
    nan_history = [(0, {"val_mse": math.nan}), (1, {"val_mse": math.nan})]
    obj = Objective("val_mse", "minimize")
    outcome = classify(ok, 0, Flags(), objective=obj, history=nan_history)
    assert outcome.reason == "diverged at step 0 (val_mse=nan)"
    assert "never reported" not in (outcome.reason or "")
    # The same with only the returned metrics (no report at all).
    outcome = classify(ok, 0, Flags(), objective=obj)
    assert outcome.reason == "diverged at step 0 (val_mse=nan)"


def test_reduce_history_ignores_infinities() -> None:
    history = [(0, {"m": 0.5}), (1, {"m": math.inf}), (2, {"m": -math.inf})]
    assert reduce_history(history, "m", "maximize", "best") == 0.5
    assert reduce_history(history, "m", "minimize", "best") == 0.5


# several objectives and constraints
TWO = Objective(
    "score",
    "maximize",
    "best",
    others=("cost",),
    constraints=(ConstraintSpec("size", max=5.0),),
)
TWO_HISTORY = [
    (0, {"score": 0.2, "cost": 1.0, "size": 9.0}),
    (1, {"score": 0.9, "cost": 4.0, "size": 3.0}),
    (2, {"score": 0.4, "cost": 0.5, "size": 3.0}),
]


def test_several_objectives_come_from_one_epoch_with_its_constraints() -> None:
    outcome = classify(OK, 0, Flags(), objective=TWO, history=TWO_HISTORY)
    assert (outcome.state, outcome.value, outcome.values) == ("COMPLETE", 0.9, (0.9, 4.0))
    assert outcome.constraints == (-2.0,)


def test_a_constraint_metric_never_reported_fails_the_trial() -> None:
    history = [(s, {k: v for k, v in m.items() if k != "size"}) for s, m in TWO_HISTORY]
    outcome = classify(OK, 0, Flags(), objective=TWO, history=history)
    assert outcome.state == "FAIL"
    assert outcome.reason == (
        "constraint metric 'size' was never reported as a finite number; the trial reported "
        "['cost', 'score']"
    )


def test_the_second_objective_diverging_names_it() -> None:
    diverged = classify(OK, 0, Flags(diverged=(1, math.nan), diverged_metric="cost"), objective=TWO)
    assert diverged.reason == "diverged at step 1 (cost=nan)"
    nan_only = [(0, {"score": 0.3, "cost": math.inf, "size": 1.0})]
    outcome = classify(OK, 0, Flags(), objective=TWO, history=nan_only)
    assert outcome.reason == "diverged at step 0 (cost=inf)"


def test_a_pruned_trial_carries_its_constraint_values() -> None:
    one = Objective("score", "maximize", constraints=(ConstraintSpec("size", max=5.0),))
    outcome = classify(None, None, Flags(pruned_step=1), objective=one, history=TWO_HISTORY[:2])
    assert (outcome.state, outcome.constraints) == ("PRUNED", (-2.0,))


def test_out_of_memory_in_a_gpu_share_names_the_share() -> None:
    oom = error(
        0, "torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 2 GiB", 1.0, oom=True
    )
    outcome = classify(oom, 1, Flags(), objective=OBJ, limits=Limits(per_gpu=4))
    assert outcome.reason == (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB "
        "(trials.per_gpu=4: 1/4 of its GPU's memory)"
    )
    other = error(0, "ValueError", "bad shape", 1.0)
    assert classify(other, 1, Flags(), objective=OBJ, limits=Limits(per_gpu=4)).reason == (
        "ValueError: bad shape"
    )


def test_a_pruned_trial_reads_as_pruned_by_its_pruner() -> None:
    from dvt_hpo.results.outcome import pruned_reason, reason_of

    assert pruned_reason(3, "median") == "pruned at step 3 by MedianPruner"
    assert reason_of("PRUNED", {"reason": pruned_reason(3, "hyperband")}) == (
        "pruned at step 3 by HyperbandPruner"
    )
    # A trial recorded before pruned trials had a reason still reads as pruned.
    assert reason_of("PRUNED", {"pruned_step": 2, "exit": "exit code 3"}) == "pruned at step 2"
    assert reason_of("COMPLETE", {"pruned_step": 2}) is None
