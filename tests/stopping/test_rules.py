"""When a run stops launching and when it exits 1: the pure rules, as tables."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from dvt_hpo.stopping.rules import (
    SAME_REASON_STOP,
    failure_kind,
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
    ("one", "other"),
    [
        ("ValueError: bad lr 0.0123", "ValueError: bad lr 1e-05"),
        ("ValueError: x=-3.5e+10", "ValueError: x=2"),
        (
            "FileNotFoundError: [Errno 2] No such file or directory: '/data/a/12.png'",
            "FileNotFoundError: [Errno 2] No such file or directory: '/data/b/7.png'",
        ),
        ("KeyError: 'conv2d_7'", 'KeyError: "layer 3"'),
        (
            "RuntimeError: bad input at runs/t3/x.py:12",
            "RuntimeError: bad input at runs/t9/x.py:80",
        ),
        ("rank 1: RuntimeError: shape [4, 8]", "rank 0: RuntimeError: shape [16, 2]"),
    ],
)
def test_failures_differing_in_numbers_paths_or_quoted_values_are_alike(
    one: str, other: str
) -> None:
    assert failure_kind(one) == failure_kind(other)
    message = stop_message([fail(one), fail(other), fail(one)], None, 30)
    assert message is not None and "failed with alike" not in message, message
    assert f"failed alike (the same error, numbers, paths and quotes aside): {one}" in message


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("ValueError: bad lr 0.1", "TypeError: bad lr 0.1"),  # another kind
        ("ValueError: bad lr 0.1", "ValueError: bad momentum 0.1"),  # another message
        ("KeyError: 'x' in model.conv2", "KeyError: 'x' in model.conv3"),  # names keep digits
    ],
)
def test_another_kind_or_message_is_another_failure(one: str, other: str) -> None:
    assert failure_kind(one) != failure_kind(other)
    assert stop_message([fail(one), fail(other), fail(one)], None, 30) is None


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


def test_nothing_succeeded_groups_reasons_that_fail_alike() -> None:
    outcomes = [fail("ValueError: lr 0.1"), fail("ValueError: lr 0.2"), fail("OSError: disk")]
    assert nothing_succeeded(outcomes) == (
        "no trial of this run succeeded (3 failed); most common reason (2 of 3): ValueError: lr 0.1"
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
