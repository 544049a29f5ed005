"""Samplers and pruners built from their spec (dvt_hpo.sampling.optuna_factory)."""

from __future__ import annotations

import optuna
import pytest

from dvt_hpo.sampling import space
from dvt_hpo.studyfile import (
    Dimension,
    SamplerSpec,
    build_sampler,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_build_sampler_seed_offset_and_constant_liar() -> None:
    dims = (Dimension("x", "float", "x", low=0.0, high=1.0),)
    tpe = build_sampler(SamplerSpec("tpe", {"seed": 5}), dims, seed_offset=3, parallel=4)
    assert isinstance(tpe, optuna.samplers.TPESampler)
    assert tpe._constant_liar is True

    # A resumed seeded sampler continues differently from a fresh one with the same seed,
    # exactly like a sampler seeded with seed + offset.
    def first_values(seed: int, offset: int = 0) -> list[float]:
        sampler = build_sampler(SamplerSpec("random", {"seed": seed}), dims, seed_offset=offset)
        study = optuna.create_study(sampler=sampler)
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
        return [t.params["x"] for t in study.trials]

    assert first_values(5, offset=3) != first_values(5)
    assert first_values(5, offset=3) == first_values(8)
    # QMC continues its sequence from the study, so its seed is left alone.
    qmc = build_sampler(SamplerSpec("qmc", {"seed": 5}), dims, seed_offset=3)
    assert qmc._seed == 5
    # The user's explicit constant_liar wins.
    spec = SamplerSpec("tpe", {"constant_liar": False})
    assert build_sampler(spec, dims, parallel=4)._constant_liar is False


def test_build_sampler_grid_enumerates_the_space() -> None:
    dims = (
        Dimension("a", "float", "a", low=0.1, high=0.3, step=0.1),
        Dimension("b", "int", "b", low=1, high=5, step=2),
        Dimension("c", "bool", "c"),
    )
    sampler = build_sampler(SamplerSpec("grid", {"seed": 0}), dims)
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: (space.sample(t, dims), 0.0)[1], n_trials=100)
    combos = {(t.params["a"], t.params["b"], t.params["c"]) for t in study.trials}
    assert len(study.trials) == len(combos) == 3 * 3 * 2
    assert {c[0] for c in combos} == {0.1, 0.2, 0.3}


@pytest.mark.parametrize(
    ("kind", "multi"),
    [
        ("tpe", True),
        ("nsga2", True),
        ("nsga3", True),
        ("random", True),
        ("qmc", True),
        ("grid", True),
        ("gp", True),
        ("cmaes", False),
    ],
)
def test_which_samplers_take_several_objectives(kind: str, multi: bool) -> None:
    from dvt_hpo.sampling.optuna_factory import supports_multi_objective

    assert supports_multi_objective(kind) is multi


def test_constraints_func_goes_to_the_samplers_that_take_one() -> None:
    from dvt_hpo.sampling.optuna_factory import accepts_constraints

    assert [
        k
        for k in ("tpe", "nsga2", "nsga3", "gp", "random", "cmaes", "qmc")
        if accepts_constraints(k)
    ] == [
        "tpe",
        "nsga2",
        "nsga3",
        "gp",
    ]


def test_the_constrained_default_says_no_deprecation_of_its_own_setting() -> None:
    """It sets consider_endpoints (deprecated by Optuna 4.9): a study that set nothing is not
    warned on every run."""
    import warnings

    from dvt_hpo.sampling.kinds import DEFAULTS

    CONSTRAINED_SAMPLER = DEFAULTS["constrained"][0]  # noqa: N806

    dims = [Dimension(name="x", kind="float", path="x", low=0.0, high=1.0)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sampler = build_sampler(CONSTRAINED_SAMPLER, dims, constrained=True)
    assert isinstance(sampler, optuna.samplers.TPESampler)
