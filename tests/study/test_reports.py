"""A report's one decision: the diverged path as a pure rule; the pruner, the pruner for several
objectives and the strict budget through real trials (tests/study/test_loop.py,
tests/study/test_mo_pruner_run.py, tests/budget/test_compute.py)."""

from __future__ import annotations

import math
import threading
from types import SimpleNamespace
from typing import Any

import optuna

from dvt_hpo.study.reports import KEEP, PruneDecision, ReportHandler, diverged, epochs_left


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


def test_a_stop_pauses_only_with_epochs_left_counted_by_reports() -> None:
    # A trainer counting steps from 1: its second of three reports (step 2) still has one left.
    assert epochs_left({"epochs": 3}, 2)
    assert not epochs_left({"epochs": 3}, 3)
    assert epochs_left({"lr": 0.1}, 50)  # no epochs in the config: not known to be done
    assert epochs_left(None, 1)


# -- ReportHandler._decide: one objective and the strict budget, on a real Optuna trial --------

WHY = "study.budget.epochs=4 spent (4 epochs)"


def _handler(
    pruner: optuna.pruners.BasePruner,
    *,
    budget: Any = None,
    pause: bool = False,
    promoted_at: int | None = None,
) -> ReportHandler:
    """A handler on a fresh trial of an in-memory study whose objective is ``loss``; the
    handle's other parts are stand-ins (the decision reads only these)."""
    study = optuna.create_study(pruner=pruner)
    objective = SimpleNamespace(names=["loss"], metric="loss", is_multi=False)
    spec = SimpleNamespace(objective=objective, trials=SimpleNamespace(pause=pause))
    handler = ReportHandler()
    handle: Any = SimpleNamespace(
        spec=spec, lock=threading.RLock(), db=lambda call, what: call(), budget=budget
    )
    handler.study = handle
    handler.trial = study.ask()
    plan: Any = SimpleNamespace(promoted_at=promoted_at) if promoted_at is not None else None
    handler.resume = plan
    handler.config = {"epochs": 3}
    handler._init_reports()
    return handler


def _strict(why: str | None, *, strict: bool = True) -> Any:
    return SimpleNamespace(strict=strict, exhausted=lambda: why)


def test_optunas_pruner_stops_one_objective_at_its_step() -> None:
    handler = _handler(optuna.pruners.ThresholdPruner(upper=1.0))
    assert handler._decide(0, {"loss": 0.5}) == KEEP
    assert handler._decide(1, {"loss": 2.0}) == PruneDecision(True, 1)
    assert handler.trial.study.trials[0].intermediate_values == {0: 0.5, 1: 2.0}


def test_a_nan_objective_is_diverged_before_the_pruner_is_asked() -> None:
    handler = _handler(optuna.pruners.ThresholdPruner(upper=1.0))
    decision = handler._decide(2, {"loss": math.nan})
    assert decision.prune and decision.diverged is not None and decision.step is None
    assert handler.trial.study.trials[0].intermediate_values == {}


def test_a_stop_with_epochs_left_pauses_under_trials_pause() -> None:
    handler = _handler(optuna.pruners.ThresholdPruner(upper=1.0), pause=True)
    handler.history = [(0, {"loss": 2.0})]  # on_report stores the report before deciding
    assert handler._decide(0, {"loss": 2.0}) == PruneDecision(True, 0, pause=True)
    handler.history += [(1, {"loss": 2.0}), (2, {"loss": 2.0})]  # the last of 3 epochs
    assert handler._decide(2, {"loss": 2.0}) == PruneDecision(True, 2, pause=False)


def test_a_continuation_is_not_judged_again_up_to_where_it_was_promoted() -> None:
    handler = _handler(optuna.pruners.ThresholdPruner(upper=1.0), promoted_at=1)
    assert handler._decide(1, {"loss": 2.0}) == KEEP
    assert handler._decide(2, {"loss": 2.0}) == PruneDecision(True, 2)


def test_a_strict_budget_spent_stops_the_trial_over_budget() -> None:
    handler = _handler(optuna.pruners.NopPruner(), budget=_strict(WHY))
    assert handler._decide(3, {"loss": 0.5}) == PruneDecision(True, 3, over_budget=WHY)
    # A report without the objective still meets the budget.
    assert handler._decide(4, {"other": 1.0}) == PruneDecision(True, 4, over_budget=WHY)


def test_a_budget_left_lenient_or_already_said_keeps_the_trial() -> None:
    assert _handler(optuna.pruners.NopPruner(), budget=_strict(None))._decide(0, {}) == KEEP
    lenient = _strict(WHY, strict=False)
    assert _handler(optuna.pruners.NopPruner(), budget=lenient)._decide(0, {}) == KEEP
    handler = _handler(optuna.pruners.NopPruner(), budget=_strict(WHY))
    handler.over_budget = WHY  # the loop stopped it already
    assert handler._decide(0, {"loss": 0.5}) == KEEP


def test_the_pruners_stop_comes_before_the_budgets() -> None:
    handler = _handler(optuna.pruners.ThresholdPruner(upper=1.0), budget=_strict(WHY))
    assert handler._decide(0, {"loss": 2.0}) == PruneDecision(True, 0)
