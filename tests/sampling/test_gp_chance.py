"""``pruner: {kind: gp_chance}``: a trial stops once the multi-fidelity GP gives it little chance
of ending best; from the study file, and refused beside another sampler."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from dvt_hpo.sampling.gp_chance import GPChancePruner
from dvt_hpo.sampling.mf_gp import MultiFidelityGPSampler
from dvt_hpo.sampling.optuna_factory import build_pruner, pruner_class
from dvt_hpo.spec.model import PrunerSpec
from dvt_hpo.studyfile import load_spec
from tests.studyfile.helpers import BASE, bad_file_test, case

X = FloatDistribution(0.0, 1.0)
EPOCHS = 10


def _curve(x: float, epochs: int = EPOCHS) -> list[float]:
    """Curves that rise with x and with the epoch: the higher x, the better at every epoch."""
    return [x * (1 - math.exp(-e / 3)) for e in range(1, epochs + 1)]


def _study(finished: int, sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
    """``finished`` trials spread over x that ran every epoch."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = optuna.create_study(
            direction="maximize", sampler=sampler or MultiFidelityGPSampler(seed=0)
        )
    for i in range(finished):
        x = (i + 0.5) / finished
        curve = _curve(x)
        study.add_trial(
            optuna.trial.create_trial(
                state=TrialState.COMPLETE,
                value=curve[-1],
                params={"x": x},
                distributions={"x": X},
                intermediate_values=dict(enumerate(curve, 1)),
            )
        )
    return study


def _decisions(study: optuna.Study, pruner: GPChancePruner, x: float, epochs: int) -> list[bool]:
    """The pruner's decision after each of a new trial's first ``epochs`` reports at ``x``."""
    study.enqueue_trial({"x": x})
    trial = study.ask({"x": X})
    out = []
    for step, value in enumerate(_curve(x)[:epochs], 1):
        trial.report(value, step)
        out.append(pruner.prune(study, study._storage.get_trial(trial._trial_id)))
    return out


def test_a_trial_far_below_the_best_stops_and_one_near_it_runs_on() -> None:
    study = _study(12)
    pruner = GPChancePruner(min_chance=0.05)
    assert any(_decisions(study, pruner, 0.05, 5))
    assert not any(_decisions(study, pruner, 0.97, 5))


def test_it_decides_only_from_min_trials_finished_trials() -> None:
    pruner = GPChancePruner(min_chance=0.05, min_trials=5)
    assert not any(_decisions(_study(4), pruner, 0.02, 5))
    assert any(_decisions(_study(5), pruner, 0.02, 5))


def test_it_decides_only_from_a_trials_min_reports_th_report() -> None:
    study = _study(12)
    at_once = _decisions(study, GPChancePruner(), 0.05, 6)
    assert at_once[0]  # far below the best from its first report
    late = _decisions(study, GPChancePruner(min_reports=4), 0.05, 6)
    assert late[:3] == [False, False, False] and late[3:] == at_once[3:]


def test_it_keeps_a_trial_at_its_max_resource() -> None:
    pruner = GPChancePruner(min_chance=0.05, max_resource=3)
    assert _decisions(_study(12), pruner, 0.02, 5)[2:] == [False, False, False]


def test_it_keeps_a_trial_at_the_last_epoch_any_trial_reached() -> None:
    """Without max_resource too: a trial at its last report has trained every epoch."""
    last = _decisions(_study(12), GPChancePruner(min_chance=0.99), 0.02, EPOCHS)
    assert any(last[:-1]) and last[-1] is False


def test_beside_another_sampler_it_never_stops_a_trial() -> None:
    study = _study(12, optuna.samplers.RandomSampler(seed=0))
    assert not any(_decisions(study, GPChancePruner(min_chance=0.5), 0.02, 5))


def test_a_decision_during_the_random_start_leaves_the_sampler_as_it_was() -> None:
    """Its own hyperparameters before the sampler's first fit: the asks after it sample what a
    study without the pruner samples."""

    def next_x(decide: bool) -> list[float]:
        study = _study(10)
        if decide:
            _decisions(study, GPChancePruner(min_chance=0.05), 0.3, 4)
        out = []
        for _ in range(3):
            trial = study.ask()
            out.append(trial.suggest_float("x", 0.0, 1.0))
            study.tell(trial, state=TrialState.FAIL)
        return out

    # The decisions above ran before the sampler fitted (10 finished: its first ask fits).
    assert next_x(True) == next_x(False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_chance": 0.0}, "min_chance must be a number between 0 and 1, got 0.0"),
        ({"min_chance": 1}, "min_chance must be a number between 0 and 1, got 1"),
        ({"min_chance": True}, "min_chance must be a number between 0 and 1, got True"),
        ({"min_trials": 1}, "min_trials must be an integer >= 2, got 1"),
        ({"min_reports": 0}, "min_reports must be an integer >= 1, got 0"),
        ({"min_reports": 1.5}, "min_reports must be an integer >= 1, got 1.5"),
        ({"max_resource": 0}, "max_resource must be an integer >= 1 or None, got 0"),
    ],
)
def test_arguments_out_of_range_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GPChancePruner(**kwargs)  # type: ignore[arg-type]


def test_the_factory_builds_it() -> None:
    assert pruner_class("gp_chance") is GPChancePruner
    assert isinstance(build_pruner(PrunerSpec("gp_chance", {"min_chance": 0.1})), GPChancePruner)


def test_the_study_file_names_it_and_the_loader_sets_its_last_step(
    write: Callable[..., Path],
) -> None:
    text = BASE.replace(
        "  name: s\n",
        "  name: s\n  sampler: mf_gp\n  pruner: {kind: gp_chance, min_chance: 0.02}\n",
    ).replace("epochs: 1", "epochs: 10")
    spec = load_spec(write(text))
    assert (spec.study.pruner.kind, spec.study.pruner.kwargs) == (
        "gp_chance",
        {"min_chance": 0.02, "max_resource": 9},
    )


BAD = [
    case(
        "gp-chance-beside-tpe",
        BASE.replace("  name: s\n", "  name: s\n  sampler: tpe\n  pruner: gp_chance\n"),
        4,
        "study.pruner",
        "pruner kind 'gp_chance' asks the sampler's GP for a trial's chance, so it needs sampler "
        "kind 'mf_gp', got sampler 'tpe'",
    ),
]
test_bad_files = bad_file_test(BAD)
