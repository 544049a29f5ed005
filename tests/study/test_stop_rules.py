"""When a run stops launching and when it exits 1: the pure rules, as tables."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from dvt_hpo.study.stop_rules import (
    SAME_REASON_STOP,
    max_failures_limit,
    nothing_succeeded,
    stop_message,
)


@dataclass
class Out:
    state: str
    reason: str | None = None
    interrupted: bool = False


def fail(reason: str = "ValueError: boom") -> Out:
    return Out("FAIL", reason)


@pytest.mark.parametrize(
    ("max_failures", "n_trials", "expected"),
    [(None, 10, None), (3, None, 3), (0.25, 10, 3), (0.01, 10, 1), (0.5, None, None)],
)
def test_max_failures_limit(
    max_failures: float | None, n_trials: int | None, expected: int | None
) -> None:
    assert max_failures_limit(max_failures, n_trials) == expected


def test_max_failures_counts_failures_not_interruptions() -> None:
    outcomes = [fail("a"), Out("FAIL", "interrupted", interrupted=True), Out("COMPLETE")]
    assert stop_message(outcomes, 2, 10) is None
    message = stop_message([*outcomes, fail("b")], 2, 10)
    assert message == (
        "stopping: 2 trials failed in this run, reaching study.max_failures=2; last reason: b"
    )


def test_by_default_the_first_trials_failing_alike_stop_the_run() -> None:
    same = [fail() for _ in range(SAME_REASON_STOP)]
    assert stop_message(same[:-1], None, 30) is None
    message = stop_message(same, None, 30)
    assert message is not None
    assert f"the first {SAME_REASON_STOP} trials" in message and "ValueError: boom" in message
    assert "study.max_failures" in message


@pytest.mark.parametrize(
    "outcomes",
    [
        [fail("a"), fail("b"), fail("a")],  # different reasons: maybe the params
        [Out("COMPLETE"), fail(), fail(), fail()],  # one succeeded first
        [Out("PRUNED"), fail(), fail(), fail()],
    ],
)
def test_the_default_rule_needs_the_first_trials_to_fail_alike(outcomes: list[Out]) -> None:
    assert stop_message(outcomes, None, 30) is None


def test_an_explicit_max_failures_replaces_the_default_rule() -> None:
    assert stop_message([fail(), fail(), fail()], 5, 30) is None


def test_nothing_succeeded_names_the_most_common_reason() -> None:
    outcomes = [fail("a"), fail("b"), fail("b"), Out("FAIL", "interrupted", interrupted=True)]
    assert nothing_succeeded(outcomes) == (
        "no trial of this run succeeded (3 failed); most common reason (2 of 3): b"
    )


@pytest.mark.parametrize(
    "outcomes",
    [
        [],
        [Out("FAIL", "interrupted", interrupted=True)],
        [fail(), Out("COMPLETE")],
        [fail(), Out("PRUNED")],
    ],
)
def test_a_run_with_a_success_or_without_finished_trials_is_not_a_failure(
    outcomes: list[Out],
) -> None:
    assert nothing_succeeded(outcomes) is None
