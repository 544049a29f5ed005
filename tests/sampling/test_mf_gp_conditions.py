"""Which conditional parameters the multi-fidelity GP models: those one categorical parameter
every trial has decides, read from the finished trials."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import FrozenTrial, TrialState

from dvt_hpo.sampling.mf_gp_conditions import Conditions, Rule

OPTIMIZER = CategoricalDistribution(["adam", "sgd", "rmsprop"])
WIDTH = CategoricalDistribution([8, 16])
UNIT = FloatDistribution(0.0, 1.0)


def _trials(*params: dict[str, Any]) -> list[FrozenTrial]:
    kinds = {"optimizer": OPTIMIZER, "width": WIDTH}
    out = []
    for number, p in enumerate(params):
        t = optuna.trial.create_trial(
            state=TrialState.COMPLETE,
            value=0.0,
            params=p,
            distributions={k: kinds.get(k, UNIT) for k in p},
        )
        t.number = number
        out.append(t)
    return out


def _rules(*params: dict[str, Any]) -> dict[str, Rule]:
    conditions = Conditions()
    conditions.read("s", _trials(*params))
    return conditions.rules()


SGD_ONLY = (
    {"optimizer": "adam", "width": 8},
    {"optimizer": "sgd", "width": 8, "momentum": 0.5},
    {"optimizer": "rmsprop", "width": 16},
    {"optimizer": "sgd", "width": 16, "momentum": 0.9},
)


def test_a_parameter_one_choice_calls_for_gets_that_rule() -> None:
    # width also splits these trials (8 with and without momentum), so only optimizer explains it.
    assert _rules(*SGD_ONLY) == {"momentum": Rule("optimizer", frozenset({1}))}


def test_trials_read_in_any_order_and_in_parts_give_the_same_rule() -> None:
    conditions = Conditions()
    trials = _trials(*SGD_ONLY)
    conditions.read("s", trials[2:])
    conditions.read("s", trials)  # the first two are new, the others are not read twice
    assert conditions.rules() == {"momentum": Rule("optimizer", frozenset({1}))}
    assert conditions.distributions(["momentum"]) == {"momentum": UNIT}


def test_a_choice_never_tried_leaves_the_parameter_unexplained() -> None:
    # Nothing says whether rmsprop calls for momentum.
    assert _rules(*SGD_ONLY[:2], SGD_ONLY[3]) == {}


def test_a_parameter_no_choice_decides_is_left_out() -> None:
    assert _rules(*SGD_ONLY, {"optimizer": "adam", "width": 16, "momentum": 0.1}) == {}


def test_a_parameter_whose_ranges_differ_is_left_out() -> None:
    trials = _trials(*SGD_ONLY)
    trials[3].distributions = {**trials[3].distributions, "momentum": FloatDistribution(0, 2)}
    conditions = Conditions()
    conditions.read("s", trials)
    assert conditions.rules() == {}


def test_another_study_starts_afresh() -> None:
    conditions = Conditions()
    conditions.read("s", _trials(*SGD_ONLY))
    conditions.read("t", _trials(*SGD_ONLY[:1]))
    assert conditions.rules() == {}
