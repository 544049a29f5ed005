"""The default pruner stops a trial when successive halving or the Wilcoxon test does
(dvt_hpo.sampling.wilcoxon_halving)."""

from __future__ import annotations

import numpy as np
import optuna
import pytest

from dvt_hpo.sampling.optuna_factory import build_pruner
from dvt_hpo.sampling.wilcoxon import WilcoxonPruner
from dvt_hpo.sampling.wilcoxon_halving import WilcoxonHalvingPruner
from dvt_hpo.studyfile import PrunerSpec

optuna.logging.set_verbosity(optuna.logging.WARNING)
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def _curve(rng: np.random.Generator, epochs: int) -> list[float]:
    """A rising, noisy, quantized learning curve (accuracies on 200 validation samples)."""
    ceiling = rng.uniform(0.5, 0.95)
    speed = rng.uniform(0.05, 0.5)
    t = np.arange(1, epochs + 1)
    values = ceiling * (1 - np.exp(-speed * t)) + rng.normal(0, 0.01, epochs)
    return list(np.round(values * 200) / 200)


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"p_threshold": 0.3, "min_resource": 2, "reduction_factor": 2, "max_resource": 12}],
)
def test_every_decision_is_halvings_or_wilcoxons(direction: str, kwargs: dict[str, float]) -> None:
    """Each report is decided by the pruner and, on a twin study fed the same reports, by
    Optuna's successive halving and dvt-hpo's Wilcoxon pruner: it stops exactly when either
    does (neither at or past max_resource), and both kinds of stop happen."""
    rng = np.random.default_rng(5)
    ours = WilcoxonHalvingPruner(**kwargs)  # type: ignore[arg-type]
    limit = kwargs.get("max_resource")
    halving = optuna.pruners.SuccessiveHalvingPruner(
        min_resource=int(kwargs.get("min_resource", 3)),
        reduction_factor=int(kwargs.get("reduction_factor", 3)),
    )
    wilcoxon = WilcoxonPruner(p_threshold=float(kwargs.get("p_threshold", 0.1)))
    study = optuna.create_study(direction=direction, pruner=ours)
    twin = optuna.create_study(direction=direction)
    sign = 1.0 if direction == "maximize" else -1.0
    stopped_by = {"halving": 0, "wilcoxon": 0, "neither": 0}
    for _ in range(40):
        trial, other = study.ask(), twin.ask()
        curve = [sign * v for v in _curve(rng, 16)]
        pruned = False
        for step, value in enumerate(curve, 1):
            trial.report(value, step)
            other.report(value, step)
            by_halving = (limit is None or step < limit) and halving.prune(
                twin, twin._storage.get_trial(other._trial_id)
            )
            by_wilcoxon = (limit is None or step < limit) and wilcoxon.prune(
                twin, twin._storage.get_trial(other._trial_id)
            )
            assert trial.should_prune() == (by_halving or by_wilcoxon), (trial.number, step)
            if by_halving or by_wilcoxon:
                stopped_by["halving" if by_halving else "wilcoxon"] += 1
                pruned = True
                break
        if pruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            twin.tell(other, state=optuna.trial.TrialState.PRUNED)
        else:
            stopped_by["neither"] += 1
            study.tell(trial, curve[-1])
            twin.tell(other, curve[-1])
    assert min(stopped_by.values()) > 0, stopped_by


def test_halving_records_the_rung_even_when_the_test_stops_the_trial() -> None:
    """Later trials are ranked against every trial that reached a rung: the rung is recorded
    before the Wilcoxon test is asked."""
    # First rung at step 4, where four reports below the best's make the test's p 1/16.
    study = optuna.create_study(direction="maximize", pruner=WilcoxonHalvingPruner(min_resource=4))
    best = study.ask()
    for step in range(1, 11):
        best.report(0.9, step)
    study.tell(best, 0.9)
    bad = study.ask()
    stopped_at = None
    for step in range(1, 11):
        bad.report(0.1, step)
        if bad.should_prune():
            stopped_at = step
            break
    # At step 4 the rung keeps it (the best trial never asked, so it is alone there) and the
    # test stops it.
    assert stopped_at == 4
    attrs = study._storage.get_trial(bad._trial_id).system_attrs
    assert "completed_rung_0" in attrs


def test_no_rung_decides_at_or_past_max_resource() -> None:
    """A trial at its last report has trained everything: a rung there would waste it."""
    study = optuna.create_study(
        direction="maximize",
        pruner=WilcoxonHalvingPruner(min_resource=3, max_resource=3, p_threshold=1e-9),
    )
    first = study.ask()
    for step in range(1, 4):
        first.report(0.9, step)
    study.tell(first, 0.9)
    second = study.ask()
    decisions = []
    for step in range(1, 4):
        second.report(0.5, step)
        decisions.append(second.should_prune())
    assert decisions == [False, False, False]


def test_the_test_does_not_decide_at_the_last_report_either() -> None:
    """A trial far below the best all along, whose 4th report is the first the test can stop
    it at (p = 1/16): stopped there without max_resource; with it (epochs - 1 = 3, a training
    of 4 epochs) it completes, not recorded PRUNED after training every epoch."""
    best = [0.9, 0.92, 0.94, 0.95]
    for limit, expected in ((None, 3), (3, None)):
        study = optuna.create_study(
            direction="maximize",
            # A rung no trial reaches: only the test decides.
            pruner=WilcoxonHalvingPruner(min_resource=100, max_resource=limit, p_threshold=0.1),
        )
        first = study.ask()
        for step, value in enumerate(best):
            first.report(value, step)
        study.tell(first, best[-1])
        second = study.ask()
        stopped_at = None
        for step, value in enumerate(best):
            second.report(value - 0.3, step)
            if second.should_prune():
                stopped_at = step
                break
        assert stopped_at == expected, limit


def test_the_study_file_kind_builds_it_with_its_arguments() -> None:
    pruner = build_pruner(
        PrunerSpec("wilcoxon_halving", {"p_threshold": 0.05, "reduction_factor": 4})
    )
    assert isinstance(pruner, WilcoxonHalvingPruner)
    assert pruner._wilcoxon._p_threshold == 0.05
    assert pruner._halving._reduction_factor == 4
    assert pruner._halving._min_resource == 3


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "51"])
def test_max_resource_must_be_a_positive_integer(value: object) -> None:
    with pytest.raises(ValueError, match="max_resource must be an integer >= 1"):
        WilcoxonHalvingPruner(max_resource=value)  # type: ignore[arg-type]
