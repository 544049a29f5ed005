"""``sampler: {kind: mf_gp}``: a GP over (config, epoch) fitted on every trial's curve, stopped
and running trials included; from the study file, and refused where it cannot apply."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState
from scipy.optimize import check_grad

from dvt_hpo.sampling import mf_gp
from dvt_hpo.sampling.mf_gp import MultiFidelityGPSampler, _neg_log_likelihood
from dvt_hpo.sampling.optuna_factory import build_sampler, sampler_class
from dvt_hpo.studyfile import load_spec
from tests.studyfile.helpers import BASE, bad_file_test, case
from tests.studyfile.test_objective import multi_study

X = FloatDistribution(0.0, 1.0)


def _trial(
    x: float, curve: list[float], state: TrialState = TrialState.PRUNED
) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(
        state=state,
        value=curve[-1] if state == TrialState.COMPLETE else None,
        params={"x": x},
        distributions={"x": X},
        intermediate_values=dict(enumerate(curve, 1)),
    )


def _study(sampler: optuna.samplers.BaseSampler, direction: str = "maximize") -> optuna.Study:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return optuna.create_study(direction=direction, sampler=sampler)


def _stopped_good_study(sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """Curves rise with x, but every trial with x >= 0.5 was stopped at epoch 3 and only the
    low-x trials ran their 27 epochs: Optuna's TPE and GPSampler only see the low-x ones."""
    study = _study(sampler)
    for i in range(30):
        x = i / 30
        curve = [x * (1 - math.exp(-e / 5)) for e in range(1, 28)]
        if x >= 0.5:
            study.add_trial(_trial(x, curve[:3]))
        else:
            study.add_trial(_trial(x, curve, TrialState.COMPLETE))
    return study


def _sampled_x(sampler: optuna.samplers.BaseSampler, n: int = 8) -> list[float]:
    study = _stopped_good_study(sampler)
    out = []
    for _ in range(n):
        trial = study.ask()
        out.append(trial.suggest_float("x", 0.0, 1.0))
        study.tell(trial, state=TrialState.FAIL)  # keeps the fitted trials as they are
    return out


def test_stopped_trials_curves_steer_the_search() -> None:
    gp_x = _sampled_x(MultiFidelityGPSampler(seed=0))
    tpe_x = _sampled_x(optuna.samplers.TPESampler(seed=0))
    assert sum(x >= 0.5 for x in gp_x) >= 7
    assert sum(x >= 0.5 for x in tpe_x) <= 3  # what Optuna's TPE does with the same trials


def test_minimize_is_the_mirror_of_maximize() -> None:
    study = _study(MultiFidelityGPSampler(seed=0), direction="minimize")
    for i in range(30):
        x = i / 30
        curve = [1 - x * (1 - math.exp(-e / 5)) for e in range(1, 28)]  # a loss: low is good
        study.add_trial(_trial(x, curve[:3]) if x >= 0.5 else _trial(x, curve, TrialState.COMPLETE))
    trial = study.ask()
    assert trial.suggest_float("x", 0.0, 1.0) >= 0.5


def test_the_first_trials_are_random_until_n_startup_trials_finished() -> None:
    sampler = MultiFidelityGPSampler(n_startup_trials=40, seed=0)
    xs = _sampled_x(sampler, n=30)
    assert sum(x >= 0.5 for x in xs) <= 22  # uniform, not drawn to the stopped good trials
    assert sum(x < 0.5 for x in xs) >= 8


def test_the_same_seed_samples_the_same_points() -> None:
    assert _sampled_x(MultiFidelityGPSampler(seed=3)) == _sampled_x(MultiFidelityGPSampler(seed=3))


def test_a_fit_past_its_time_cap_keeps_the_last_fitted_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sampler = MultiFidelityGPSampler(refit_every=1, seed=0)
    study = _stopped_good_study(sampler)
    study.ask().suggest_float("x", 0.0, 1.0)  # fitted within the cap
    fitted = sampler._theta
    assert fitted is not None
    monkeypatch.setattr(mf_gp, "_FIT_CAP_S", 0.0)
    for x in (0.6, 0.75, 0.9):  # new data: a refit is due (every 10 % of the trials here)
        study.add_trial(_trial(x, [0.5, 0.6, 0.7]))
    study.ask().suggest_float("x", 0.0, 1.0)
    assert np.array_equal(sampler._theta, fitted)
    assert sampler._fitted_at == 34  # the next refit waits for the schedule, not every ask
    # Before any fit: the starting values, the same on every machine.
    first = MultiFidelityGPSampler(seed=0)
    _stopped_good_study(first).ask().suggest_float("x", 0.0, 1.0)
    assert np.array_equal(first._theta, np.round(mf_gp._start_theta(2), mf_gp._THETA_DECIMALS))


def _next_x(running_at: float | None) -> float:
    """The next x of a seeded sampler on a study whose curves peak inside the range (at 0.7,
    the trials from 0.5 up stopped at epoch 3), with a trial running at ``running_at`` (asked,
    no report yet) or none."""
    study = _study(MultiFidelityGPSampler(seed=5))
    for i in range(30):
        x = i / 30
        curve = [(1 - 4 * (x - 0.7) ** 2) * (1 - math.exp(-e / 5)) for e in range(1, 28)]
        study.add_trial(_trial(x, curve[:3]) if x >= 0.5 else _trial(x, curve, TrialState.COMPLETE))
    if running_at is not None:
        study.enqueue_trial({"x": running_at})
        study.ask().suggest_float("x", 0.0, 1.0)
    return study.ask().suggest_float("x", 0.0, 1.0)


def test_a_running_trial_without_reports_is_not_proposed_again() -> None:
    picked = _next_x(None)
    assert 0.5 <= picked <= 0.95
    # Running far from the pick changes nothing; running at the pick moves the next one away.
    assert _next_x(0.0) == pytest.approx(picked, abs=1e-6)
    assert abs(_next_x(picked) - picked) > 0.05


@pytest.mark.parametrize("first_step", [0, 1])
def test_steps_count_from_the_first_one_reported(first_step: int) -> None:
    """Trainers count epochs from 0 or 1; one-epoch trainings report a single step."""
    study = _study(MultiFidelityGPSampler(seed=0))
    for i in range(12):
        x = i / 12
        study.add_trial(
            optuna.trial.create_trial(
                state=TrialState.COMPLETE,
                value=x,
                params={"x": x},
                distributions={"x": X},
                intermediate_values={first_step: x},
            )
        )
    assert study.ask().suggest_float("x", 0.0, 1.0) > 0.5


def test_complete_trials_without_reports_are_one_fidelity() -> None:
    study = _study(MultiFidelityGPSampler(seed=0), direction="minimize")
    for i in range(12):
        x = i / 12
        study.add_trial(
            optuna.trial.create_trial(
                state=TrialState.COMPLETE,
                value=(x - 0.3) ** 2,
                params={"x": x},
                distributions={"x": X},
            )
        )
    picks = []
    for _ in range(5):
        trial = study.ask()
        x = trial.suggest_float("x", 0.0, 1.0)
        picks.append(x)
        study.tell(trial, (x - 0.3) ** 2)
    assert sum(abs(x - 0.3) < 0.15 for x in picks) >= 3


def test_conditional_parameters_are_sampled_outside_the_model() -> None:
    sampler = MultiFidelityGPSampler(seed=0)
    study = _study(sampler)
    for i in range(12):
        trial = study.ask()
        x = trial.suggest_float("x", 0.0, 1.0)
        if i % 2:
            trial.suggest_float("momentum", 0.0, 1.0)  # only in half of the trials
        study.tell(trial, x)
    trial = study.ask()
    trial.suggest_float("x", 0.0, 1.0)
    trial.suggest_float("momentum", 0.0, 1.0)
    assert set(trial.params) == {"x", "momentum"}
    assert "momentum" not in sampler.infer_relative_search_space(study, study.trials[-1])


def _optimizer_objective(trial: optuna.Trial) -> float:
    # A `when: {optimizer: sgd}`: SGD scores by its momentum, Adam a flat 0.5.
    x = trial.suggest_float("x", 0.0, 1.0)
    if trial.suggest_categorical("optimizer", ["adam", "sgd"]) == "sgd":
        return x + 2.0 * trial.suggest_float("momentum", 0.0, 1.0)
    return x + 0.5


def test_a_parameter_one_choice_calls_for_is_modelled_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sampler = MultiFidelityGPSampler(seed=0, n_startup_trials=6)
    study = _study(sampler)
    study.optimize(_optimizer_objective, n_trials=6)
    assert {t.params["optimizer"] for t in study.trials} == {"adam", "sgd"}
    assert set(sampler.infer_relative_search_space(study, study.trials[-1])) == {
        "x",
        "optimizer",
        "momentum",
    }

    def no_tpe(*args: object) -> None:
        raise AssertionError("momentum was left to univariate TPE")

    monkeypatch.setattr(sampler._tpe, "sample_independent", no_tpe)
    study.optimize(_optimizer_objective, n_trials=10)
    sgd = [t for t in study.trials[6:] if t.params["optimizer"] == "sgd"]
    assert sgd, "the model never chose SGD, where the best values are"
    assert max(t.params["momentum"] for t in sgd) > 0.8  # the model learned momentum's slope


def test_without_model_conditional_the_parameter_goes_to_tpe() -> None:
    sampler = MultiFidelityGPSampler(seed=0, n_startup_trials=6, model_conditional=False)
    study = _study(sampler)
    study.optimize(_optimizer_objective, n_trials=6)
    assert set(sampler.infer_relative_search_space(study, study.trials[-1])) == {"x", "optimizer"}


def test_a_space_that_shrinks_between_fits_refits_the_model() -> None:
    # The first trials all had "momentum" (their `when:` held), so the model was fitted on two
    # columns; the next trial lacks it and the shared space shrinks before a refit is due.
    sampler = MultiFidelityGPSampler(seed=0, n_startup_trials=3, refit_every=100)
    study = _study(sampler)
    for _ in range(4):
        trial = study.ask()
        x = trial.suggest_float("x", 0.0, 1.0)
        trial.suggest_float("momentum", 0.0, 1.0)
        study.tell(trial, x)
    trial = study.ask()  # fitted on (x, momentum)
    study.tell(trial, trial.suggest_float("x", 0.0, 1.0))  # no momentum: the space is (x)
    trial = study.ask()
    x = trial.suggest_float("x", 0.0, 1.0)
    assert 0.0 <= x <= 1.0
    assert set(sampler.infer_relative_search_space(study, study.trials[-1])) == {"x"}


def test_the_likelihood_gradient_is_exact() -> None:
    rng = np.random.default_rng(0)
    x = rng.random((40, 4))
    y = np.sin(3 * x[:, 0]) + x[:, 1] ** 2 + 0.01 * rng.normal(size=40)
    y = (y - y.mean()) / y.std()
    theta = np.array([-0.5, 0.1, 0.3, -1.0, 0.2, -3.0])
    error = check_grad(
        lambda t: _neg_log_likelihood(t, x, y)[0],
        lambda t: _neg_log_likelihood(t, x, y)[1],
        theta,
    )
    assert error < 1e-4 * np.linalg.norm(_neg_log_likelihood(theta, x, y)[1])


def test_model_conditional_takes_a_boolean_only() -> None:
    with pytest.raises(ValueError, match="model_conditional must be true or false, got 1"):
        MultiFidelityGPSampler(model_conditional=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["n_startup_trials", "refit_every", "n_candidates"])
def test_counts_below_their_minimum_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match=f"{name} must be an integer >= "):
        MultiFidelityGPSampler(**{name: 0})


def test_the_factory_builds_it_with_the_seed_offset() -> None:
    from dvt_hpo.spec.model import SamplerSpec

    sampler = build_sampler(SamplerSpec("mf_gp", {"seed": 1}), [], seed_offset=2)
    assert isinstance(sampler, MultiFidelityGPSampler)
    assert sampler_class("mf_gp") is MultiFidelityGPSampler
    assert _sampled_x(sampler) == _sampled_x(MultiFidelityGPSampler(seed=3))


def test_the_study_file_names_it(write: Callable[..., Path]) -> None:
    text = BASE.replace("  name: s\n", "  name: s\n  sampler: {kind: mf_gp, refit_every: 10}\n")
    spec = load_spec(write(text))
    assert (spec.study.sampler.kind, spec.study.sampler.kwargs) == ("mf_gp", {"refit_every": 10})


BAD = [
    case(
        "mf-gp-with-several-objectives",
        multi_study("  sampler: mf_gp"),
        3,
        "study.sampler",
        "sampler kind 'mf_gp' supports one objective only",
    ),
    case(
        "mf-gp-unknown-argument",
        BASE.replace("  name: s\n", "  name: s\n  sampler: {kind: mf_gp, n_ei_candidates: 9}\n"),
        3,
        "study.sampler.n_ei_candidates",
        "unknown argument 'n_ei_candidates' for MultiFidelityGPSampler",
        "refit_every",
    ),
]

test_mf_gp_is_refused_where_it_cannot_apply = bad_file_test(BAD)
