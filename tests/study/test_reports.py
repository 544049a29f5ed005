"""A report's one decision: the diverged path as a pure rule; the pruner, the pruner for several
objectives and the strict budget through real trials (tests/study/test_loop.py,
tests/study/test_mo_pruner_run.py, tests/budget/test_compute.py)."""

from __future__ import annotations

import math

from dvt_hpo.study.reports import KEEP, PruneDecision, diverged


def test_a_nan_or_inf_objective_stops_the_trial_as_diverged() -> None:
    nan = diverged(3, {"loss": math.nan}, ["loss"])
    assert isinstance(nan, PruneDecision) and nan.prune and nan.diverged is not None
    step, value, metric = nan.diverged
    assert (step, math.isnan(value), metric) == (3, True, "loss")
    decision = diverged(2, {"acc": 0.5, "loss": math.inf}, ["acc", "loss"])
    assert decision is not None and decision.prune
    assert decision.diverged == (2, math.inf, "loss") and decision.step is None


def test_finite_values_and_other_metrics_do_not_diverge() -> None:
    assert diverged(0, {"loss": 1.0, "other": math.nan}, ["loss"]) is None
    assert diverged(0, {}, ["loss"]) is None
    assert not KEEP.prune and KEEP.over_budget is None
