from __future__ import annotations

import json

import optuna
import pytest

from dvt_hpo.sampling import space
from dvt_hpo.studyfile import Condition, Dimension

optuna.logging.set_verbosity(optuna.logging.WARNING)


# --- dotted paths stay importable from space (the runner uses them) ---------------------------


def test_same_value_never_mixes_bools_and_numbers() -> None:
    assert space.same_value(True, True)
    assert not space.same_value(True, 1)
    assert not space.same_value(0, False)
    assert space.same_value(1, 1.0)
    assert not space.same_value("1", 1)
    assert space.same_value(None, None)


# --- sampling ----------------------------------------------------------------------------------

OPTIMIZER = Dimension("optimizer", "categorical", "optim.target", choices=("sgd", "adam"))
DIMS = (
    Dimension("lr", "float", "optim.optim_args.lr", low=1e-4, high=1e-1, log=True),
    Dimension("dropout", "float", "model.kwargs.dropout", low=0.0, high=0.5, step=0.1),
    Dimension("depth", "int", "model.kwargs.depth", low=1, high=9, step=2),
    Dimension("width", "int", "model.kwargs.width", low=8, high=256, log=True),
    OPTIMIZER,
    Dimension(
        "momentum",
        "float",
        "optim.optim_args.momentum",
        low=0.5,
        high=0.99,
        when=Condition({"optimizer": ("sgd",)}),
    ),
    Dimension("ema", "bool", "ema.enabled"),
    Dimension(
        "decay",
        "categorical",
        "ema.decay",
        choices=(0.99, 0.999),
        when=Condition({"ema": (True,)}),
    ),
    # Chained: only when `decay` was sampled (so ema is on) and is 0.999.
    Dimension(
        "warmup",
        "int",
        "ema.warmup_steps",
        low=0,
        high=100,
        when=Condition({"decay": (0.999,)}),
    ),
)


@pytest.fixture(scope="module")
def sampled() -> list[dict]:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    results: list[dict] = []

    def objective(trial: optuna.Trial) -> float:
        params = space.sample(trial, DIMS)
        results.append(params)
        return 0.0

    study.optimize(objective, n_trials=80)
    # What Optuna stored is exactly what sample returned, with the distributions we declare.
    dists = space.distributions(DIMS)
    for trial, params in zip(study.trials, results, strict=True):
        assert trial.params == params
        for name, dist in trial.distributions.items():
            assert dist == dists[name]
    return results


def test_sample_each_kind_in_range(sampled: list[dict]) -> None:
    for params in sampled:
        assert isinstance(params["lr"], float) and 1e-4 <= params["lr"] <= 1e-1
        assert any(abs(params["dropout"] - v) < 1e-9 for v in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5))
        assert params["depth"] in (1, 3, 5, 7, 9) and type(params["depth"]) is int
        assert type(params["width"]) is int and 8 <= params["width"] <= 256
        assert params["optimizer"] in ("sgd", "adam")
        assert type(params["ema"]) is bool
    assert {p["ema"] for p in sampled} == {False, True}
    assert {p["optimizer"] for p in sampled} == {"sgd", "adam"}


def test_sample_conditional_dimension_only_when_condition_holds(sampled: list[dict]) -> None:
    for params in sampled:
        assert ("momentum" in params) == (params["optimizer"] == "sgd")
        assert ("decay" in params) == params["ema"]
        assert ("warmup" in params) == (params.get("decay") == 0.999)
    # Every branch was seen, so the checks above are not vacuous.
    assert any("warmup" in p for p in sampled)
    assert any("decay" in p and "warmup" not in p for p in sampled)
    assert any("momentum" in p for p in sampled)


def test_condition_holds() -> None:
    cond = Condition({"a": (1, 2), "b": (True,)})
    assert space.condition_holds(cond, {"a": 2, "b": True})
    assert not space.condition_holds(cond, {"a": 3, "b": True})
    assert not space.condition_holds(cond, {"a": 1, "b": 1})  # 1 is not True here
    assert not space.condition_holds(cond, {"a": 1})
    assert space.condition_holds(None, {})


def test_distributions() -> None:
    dists = space.distributions(DIMS)
    assert dists["lr"] == optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)
    assert dists["dropout"] == optuna.distributions.FloatDistribution(0.0, 0.5, step=0.1)
    assert dists["depth"] == optuna.distributions.IntDistribution(1, 9, step=2)
    assert dists["width"] == optuna.distributions.IntDistribution(8, 256, log=True)
    assert dists["ema"] == optuna.distributions.CategoricalDistribution([False, True])
    assert list(dists) == [d.name for d in DIMS]


def test_grid_values() -> None:
    assert space.grid_values(DIMS[1]) == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]  # exact, not 0.30000...
    assert space.grid_values(DIMS[2]) == [1, 3, 5, 7, 9]
    assert space.grid_values(OPTIMIZER) == ["sgd", "adam"]
    assert space.grid_values(DIMS[6]) == [False, True]
    assert space.grid_values(DIMS[0]) is None
    assert [space.grid_size(d) for d in DIMS[:3]] == [None, 6, 5]
    uneven = Dimension("x", "float", "x", low=0.0, high=1.0, step=0.3)
    assert space.grid_values(uneven) == [0.0, 0.3, 0.6, 0.9]
    assert space.grid_size(uneven) == 4


def test_apply_writes_sampled_values_into_a_copy() -> None:
    config = {
        "optim": {"target": "adam", "optim_args": {"lr": 0.001}},
        "model": {"kwargs": {"width": 16}},
        "ema": {"enabled": False, "decay": 0.9},
        "sched": None,
    }
    dims = (
        *DIMS[:1],
        Dimension("width", "int", "model.kwargs.width", low=8, high=64),
        Dimension("warm", "int", "sched.warmup.steps", low=1, high=5),
        DIMS[7],  # decay: absent from params, so the config keeps its value
    )
    out = space.apply(config, dims, {"lr": 0.01, "width": 32, "warm": 3})
    assert out["optim"]["optim_args"]["lr"] == 0.01
    assert out["model"]["kwargs"]["width"] == 32
    assert out["sched"] == {"warmup": {"steps": 3}}
    assert out["ema"]["decay"] == 0.9
    # the input is untouched
    assert config["optim"]["optim_args"]["lr"] == 0.001
    assert config["sched"] is None


def test_space_signature_is_json_safe_and_stable() -> None:
    sig = space.space_signature(DIMS)
    assert json.loads(json.dumps(sig)) == sig
    assert sig["dimensions"]["lr"] == {
        "kind": "float",
        "path": "optim.optim_args.lr",
        "low": 1e-4,
        "high": 1e-1,
        "step": None,
        "log": True,
    }
    assert sig["dimensions"]["decay"]["when"] == {"ema": [True]}
    assert sig["dimensions"]["optimizer"]["choices"] == ["sgd", "adam"]
    assert space.diff_spaces(sig, space.space_signature(DIMS)) == []
    # A signature read back from JSON compares equal to a fresh one.
    assert space.diff_spaces(json.loads(json.dumps(sig)), sig) == []


def test_diff_spaces_reports_each_change() -> None:
    old = space.space_signature(DIMS)
    new_dims = list(DIMS)
    new_dims[0] = Dimension("lr", "float", "optim.optim_args.lr", low=1e-4, high=0.5, log=True)
    new_dims[2] = Dimension("depth", "float", "model.kwargs.depth", low=1.0, high=9.0)
    new_dims[4] = Dimension("optimizer", "categorical", "optim.target", choices=("sgd", "adamw"))
    new_dims[7] = Dimension("decay", "categorical", "ema.decay", choices=(0.99, 0.999))
    del new_dims[3]  # width
    new_dims.append(Dimension("dropout2", "bool", "model.kwargs.extra"))
    changes = space.diff_spaces(old, space.space_signature(new_dims))
    assert "lr: high 0.1 -> 0.5" in changes
    assert "depth: kind int -> float" in changes
    assert "depth: step 2 -> None" in changes
    assert "width: removed" in changes
    assert "dropout2: added" in changes
    assert 'optimizer: choices ["sgd", "adam"] -> ["sgd", "adamw"]' in changes
    assert 'decay: when {"ema": [true]} -> (none)' in changes


def test_diff_spaces_bool_is_not_int() -> None:
    a = space.space_signature([Dimension("c", "categorical", "x", choices=(True, False))])
    b = space.space_signature([Dimension("c", "categorical", "x", choices=(1, 0))])
    assert space.diff_spaces(a, b) == ["c: choices [true, false] -> [1, 0]"]
