"""dvt-hpo's Wilcoxon pruner decides exactly as Optuna's (dvt_hpo.sampling.wilcoxon)."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
import scipy.stats as ss

from dvt_hpo.sampling.optuna_factory import build_pruner
from dvt_hpo.sampling.wilcoxon import EXACT_MAX_N, WilcoxonPruner, signed_rank_pvalue
from dvt_hpo.studyfile import PrunerSpec

optuna.logging.set_verbosity(optuna.logging.WARNING)
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def _diffs(rng: np.random.Generator, n: int, grid: float) -> np.ndarray:
    """Differences of accuracies on a validation set of 1/grid samples: ties and zeros."""
    a = np.round(rng.uniform(0.5, 0.9, n) / grid) * grid
    b = np.round(rng.uniform(0.5, 0.9, n) / grid) * grid
    return a - b


@pytest.mark.parametrize("alternative", ["less", "greater"])
def test_the_p_value_is_scipys_to_the_bit(alternative: str) -> None:
    rng = np.random.default_rng(7)
    cases = [_diffs(rng, n, grid) for n in range(1, 10) for grid in (0.1, 0.02, 1e-4)]
    cases += [
        np.zeros(5),  # all zero
        np.array([0.1, -0.1, 0.1, 0.2, -0.2]),  # ties of opposite sign
        np.array([0.3, 0.1, -0.2, 0.05]),  # no tie, no zero: scipy's exact distribution
        _diffs(rng, EXACT_MAX_N + 1, 0.05),  # past the exact test: scipy's asymptotic one
    ]
    if alternative == "less":
        # The largest exact test (scipy takes about 3 s over it), once.
        cases.append(_diffs(rng, EXACT_MAX_N, 0.05))
    for d in cases:
        ours = signed_rank_pvalue(d, alternative)  # type: ignore[arg-type]
        theirs = float(ss.wilcoxon(d, alternative=alternative, zero_method="zsplit").pvalue)
        assert ours == theirs or (np.isnan(ours) and np.isnan(theirs)), (d.tolist(), ours, theirs)


def test_the_study_file_kind_builds_dvt_hpos_pruner_with_its_arguments() -> None:
    pruner = build_pruner(PrunerSpec("wilcoxon", {"p_threshold": 0.05, "n_startup_steps": 3}))
    assert isinstance(pruner, WilcoxonPruner)
    assert isinstance(pruner, optuna.pruners.WilcoxonPruner)
    assert (pruner._p_threshold, pruner._n_startup_steps) == (0.05, 3)


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
@pytest.mark.parametrize("kwargs", [{}, {"p_threshold": 0.3, "n_startup_steps": 4}])
def test_every_decision_is_optunas(direction: str, kwargs: dict[str, float]) -> None:
    """Studies of quantized learning curves, every report decided by both pruners."""
    rng = np.random.default_rng(3)
    ours, theirs = WilcoxonPruner(**kwargs), optuna.pruners.WilcoxonPruner(**kwargs)
    study = optuna.create_study(direction=direction, pruner=ours)
    decisions = {True: 0, False: 0}
    for _ in range(25):
        trial = study.ask()
        level = rng.uniform(0.4, 0.9)
        curve = np.round((level - 0.3 * np.exp(-np.arange(1, 10) / 3)) * 50) / 50
        pruned = False
        for step, value in enumerate(curve, 1):
            trial.report(float(value), step)
            frozen = study._storage.get_trial(trial._trial_id)
            decision = ours.prune(study, frozen)
            assert decision == theirs.prune(study, frozen), (trial.number, step)
            decisions[decision] += 1
            if decision:
                pruned = True
                break
        if pruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, float(curve[-1]))
    # Both outcomes were exercised, not only "keep going".
    assert decisions[True] > 0 and decisions[False] > 0


def test_values_that_cannot_be_compared_are_never_pruned() -> None:
    study = optuna.create_study(direction="maximize", pruner=WilcoxonPruner())
    best = study.ask()
    for step in range(1, 6):
        best.report(0.9, step)
    study.tell(best, 0.9)
    trial = study.ask()
    trial.report(float("nan"), 1)
    with pytest.warns(UserWarning, match="infinity/NaNs"):
        assert not study.pruner.prune(study, study._storage.get_trial(trial._trial_id))


def test_a_best_trial_with_values_that_cannot_be_compared_prunes_nothing() -> None:
    study = optuna.create_study(direction="maximize", pruner=WilcoxonPruner())
    best = study.ask()
    for step, value in enumerate([0.9, float("inf"), 0.9], 1):
        best.report(value, step)
    study.tell(best, 0.9)
    trial = study.ask()
    for step in range(1, 4):
        trial.report(0.1, step)
    with pytest.warns(UserWarning, match=r"the best trial \(trial 0\)"):
        assert not study.pruner.prune(study, study._storage.get_trial(trial._trial_id))


def test_max_resource_leaves_the_last_report_undecided() -> None:
    """Optuna's test can stop a trial at its last report, after it trained every epoch; with
    ``max_resource`` (the loader's epochs - 1) it decides only before it."""
    for limit, expected in ((None, [False, False, False, True]), (3, [False, False, False, False])):
        study = optuna.create_study(
            direction="minimize", pruner=WilcoxonPruner(n_startup_steps=0, max_resource=limit)
        )
        first = study.ask()
        for step in range(4):
            first.report(1.0, step)
        study.tell(first, 1.0)
        second = study.ask()
        decisions = []
        for step in range(4):
            second.report(2.0, step)
            decisions.append(second.should_prune())
        assert decisions == expected, limit


@pytest.mark.parametrize("value", [0, -2, 1.5, True])
def test_max_resource_must_be_a_positive_integer(value: object) -> None:
    with pytest.raises(ValueError, match="max_resource must be an integer >= 1"):
        WilcoxonPruner(max_resource=value)  # type: ignore[arg-type]
