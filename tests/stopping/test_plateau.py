"""The plateau rule (``study.plateau``): pure, over a run's finished values."""

from __future__ import annotations

import pytest

from dvt_hpo.stopping.plateau import PlateauWatch, plateau_message, plateau_reached


def test_no_stop_before_the_window_has_finished() -> None:
    assert not plateau_reached([0.5, 0.5], 3, 0.0, "maximize")
    assert plateau_reached([0.5, 0.5, 0.5, 0.5], 3, 0.0, "maximize")


@pytest.mark.parametrize(
    ("values", "delta", "direction", "stops"),
    [
        # The window's best must beat the best before it by more than min_delta.
        ([0.5, 0.6, 0.4, 0.4], 0.0, "maximize", False),
        ([0.5, 0.6, 0.4, 0.4], 0.1, "maximize", True),  # +0.1 is not more than 0.1
        ([0.5, 0.61, 0.4, 0.4], 0.1, "maximize", False),
        ([0.5, 0.4, 0.3, 0.45], 0.0, "maximize", True),  # worse values never help
        ([1.0, 0.9, 1.2, 1.1], 0.0, "minimize", False),
        ([1.0, 1.1, 1.2, 1.0], 0.0, "minimize", True),  # equal is no improvement
        ([1.0, 0.96, 1.2, 1.1], 0.05, "minimize", True),
    ],
)
def test_improvement_over_the_last_trials(
    values: list[float], delta: float, direction: str, stops: bool
) -> None:
    assert plateau_reached(values, 3, delta, direction) is stops  # type: ignore[arg-type]


def test_pruned_trials_count_as_finished_without_a_value() -> None:
    assert plateau_reached([0.5, None, None, None], 3, 0.0, "maximize")
    assert not plateau_reached([0.5, None, 0.7, None], 3, 0.0, "maximize")


def test_nothing_to_judge_without_any_value_before_or_in_the_window() -> None:
    assert not plateau_reached([None] * 10, 3, 0.0, "maximize")
    # The first value ever is an improvement.
    assert not plateau_reached([None, None, None, 0.2], 3, 0.0, "maximize")


def test_the_studys_best_before_the_run_is_the_bar_for_a_rerun() -> None:
    # A rerun gets `trials` new trials: 0.8 from an earlier run is what they must beat.
    assert plateau_reached([0.7, 0.75, 0.79], 3, 0.0, "maximize", prior_best=0.8)
    assert not plateau_reached([0.7, 0.81, 0.79], 3, 0.0, "maximize", prior_best=0.8)
    assert not plateau_reached([0.7, 0.75], 3, 0.0, "maximize", prior_best=0.8)


def test_the_message_names_the_rule_and_how_to_go_on() -> None:
    text = plateau_message(20, 0.001, 0.912345678)
    assert "0.912346" in text and "last 20 finished trials" in text and "0.001" in text
    assert "rerun" in text


def test_the_watch_of_a_run_says_once_the_rule_stops_it() -> None:
    watch = PlateauWatch(2, 0.0, "minimize", prior_best=1.0)
    assert watch.finished(0.9) is None  # improves on the study's best
    assert watch.finished(None) is None  # a pruned trial counts, without a value
    message = watch.finished(0.95)
    assert message is not None and "(0.9)" in message and "last 2 finished trials" in message
