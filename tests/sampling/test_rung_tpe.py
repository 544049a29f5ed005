"""``sampler: {kind: rung_tpe}``: TPE fitted on the values at the highest rung that enough
finished trials reached, pruned ones included; from the study file, and refused where it
cannot apply."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from dvt_hpo.sampling.optuna_factory import build_sampler, sampler_class
from dvt_hpo.sampling.rung_tpe import RungTPESampler, rung_of
from dvt_hpo.studyfile import load_spec
from tests.studyfile.helpers import BASE, bad_file_test, case
from tests.studyfile.test_objective import multi_study

X = FloatDistribution(0.0, 1.0)


@pytest.mark.parametrize(
    ("steps", "min_trials", "rung"),
    [
        ([], 3, None),
        ([4], 3, 4),  # fewer trials than min_trials: the lowest they all reached
        ([1, 1, 3, 3, 5], 2, 3),
        ([1, 1, 3, 3, 5], 1, 5),
        ([1, 1, 3, 3, 5], 5, 1),
        ([52, 52, 2, 2], 3, 2),
    ],
)
def test_the_rung_is_the_highest_epoch_min_trials_reached(
    steps: list[int], min_trials: int, rung: int | None
) -> None:
    assert rung_of(steps, min_trials) == rung


def _trial(x: float, curve: list[float], complete: bool) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(
        state=TrialState.COMPLETE if complete else TrialState.PRUNED,
        value=curve[-1] if complete else None,
        params={"x": x},
        distributions={"x": X},
        intermediate_values=dict(enumerate(curve, 1)),
    )


def _misleading_study(sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """High x is good at epoch 4 but every high-x trial was pruned there; the low-x trials ran
    to the end with low values. Optuna's TPE ranks the complete (low-x) trials first."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = optuna.create_study(direction="maximize", sampler=sampler)
    for i in range(30):
        x = i / 30
        if x >= 0.5:
            study.add_trial(_trial(x, [x] * 4, complete=False))
        else:
            study.add_trial(_trial(x, [0.1 * x] * 8, complete=True))
    return study


def _sampled_x(sampler: optuna.samplers.BaseSampler) -> list[float]:
    study = _misleading_study(sampler)
    out = []
    for _ in range(20):
        trial = study.ask()
        out.append(trial.suggest_float("x", 0.0, 1.0))
        study.tell(trial, state=TrialState.FAIL)  # keeps the fitted trials as they are
    return out


def test_pruned_trials_values_at_the_rung_steer_the_search() -> None:
    rung = RungTPESampler(min_trials=25, seed=0)
    study = _misleading_study(rung)
    assert rung.rung(study) == 4  # all 30 reached epoch 4, only 15 went past it
    rung_x = _sampled_x(RungTPESampler(min_trials=25, seed=0))
    plain_x = _sampled_x(optuna.samplers.TPESampler(seed=0))
    assert sum(x >= 0.5 for x in rung_x) >= 15
    assert sum(x >= 0.5 for x in plain_x) <= 5  # what Optuna's TPE does with the same trials


def test_at_a_late_rung_only_the_trials_that_reached_it_rank_first() -> None:
    # min_trials 10: the rung is epoch 8, which only the (poor) complete trials reached.
    rung_x = _sampled_x(RungTPESampler(min_trials=10, seed=0))
    assert sum(x >= 0.5 for x in rung_x) <= 5


def test_the_same_seed_samples_the_same_points() -> None:
    assert _sampled_x(RungTPESampler(seed=3)) == _sampled_x(RungTPESampler(seed=3))


def test_multivariate_samples_from_the_rung_copy() -> None:
    xs = _sampled_x(RungTPESampler(min_trials=25, multivariate=True, seed=0))
    assert sum(x >= 0.5 for x in xs) >= 15


def test_a_min_trials_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="min_trials must be an integer >= 1, got 0"):
        RungTPESampler(min_trials=0)


def test_the_factory_builds_it_with_the_seed_offset() -> None:
    from dvt_hpo.spec.model import SamplerSpec

    sampler = build_sampler(
        SamplerSpec("rung_tpe", {"seed": 1, "min_trials": 5}), [], seed_offset=2
    )
    assert isinstance(sampler, RungTPESampler)
    assert sampler_class("rung_tpe") is RungTPESampler
    assert _sampled_x(sampler) == _sampled_x(RungTPESampler(min_trials=5, seed=3))


def test_the_study_file_names_it(write: Callable[..., Path]) -> None:
    text = BASE.replace("  name: s\n", "  name: s\n  sampler: {kind: rung_tpe, min_trials: 20}\n")
    spec = load_spec(write(text))
    assert (spec.study.sampler.kind, spec.study.sampler.kwargs) == ("rung_tpe", {"min_trials": 20})


BAD = [
    case(
        "rung-tpe-with-several-objectives",
        multi_study("  sampler: rung_tpe"),
        3,
        "study.sampler",
        "sampler kind 'rung_tpe' supports one objective only",
    ),
    case(
        "rung-tpe-unknown-argument",
        BASE.replace(
            "  name: s\n", "  name: s\n  sampler: {kind: rung_tpe, constant_liar: true}\n"
        ),
        3,
        "study.sampler.constant_liar",
        "unknown argument 'constant_liar' for RungTPESampler",
        "min_trials",
    ),
]

test_rung_tpe_is_refused_where_it_cannot_apply = bad_file_test(BAD)
