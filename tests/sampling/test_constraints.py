"""Constraint values where Optuna's samplers and the dashboard read them: stored before the
tell, read back, judged feasible by Optuna's rule (every value ``<= 0``)."""

from __future__ import annotations

import math

import optuna
import pytest

from dvt_hpo.optuna_api.private import trial_id_of
from dvt_hpo.sampling.constraints import (
    CONSTRAINTS_KEY,
    constraint_value,
    constraints_of,
    feasible,
    is_feasible,
    store_constraints,
    stored_constraints,
    violation,
)
from dvt_hpo.spec.model import ConstraintSpec


@pytest.mark.parametrize(
    ("bounds", "value", "expected"),
    [
        ({"max": 10.0}, 12.0, 2.0),
        ({"max": 10.0}, 7.0, -3.0),
        ({"min": 0.5}, 0.25, 0.25),
        ({"min": 1.0, "max": 3.0}, 5.0, 2.0),  # the larger of the two
        ({"min": 1.0, "max": 3.0}, 2.0, -1.0),
    ],
)
def test_a_bound_becomes_optunas_value_feasible_at_or_below_zero(
    bounds: dict[str, float], value: float, expected: float
) -> None:
    assert constraint_value(ConstraintSpec(metric="m", **bounds), value) == expected


def test_feasible_is_every_value_at_or_below_zero() -> None:
    assert feasible([]) and feasible([0.0, -1.0])
    assert not feasible([0.0, 1e-9])


def test_attrs_without_constraints_are_feasible_and_violate_nothing() -> None:
    assert constraints_of({}) is None and constraints_of({CONSTRAINTS_KEY: "x"}) is None
    assert is_feasible({}) and violation({}) == 0.0
    attrs = {CONSTRAINTS_KEY: [2, -1.0, 0.5]}
    assert constraints_of(attrs) == (2.0, -1.0, 0.5)
    assert not is_feasible(attrs) and violation(attrs) == 2.5


def test_stored_values_are_read_back_from_the_told_trials() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage)
    for values, objective in (([0.5], 1.0), ([-0.5], 2.0)):
        trial = study.ask()
        store_constraints(storage, trial_id_of(trial), values)
        study.tell(trial, objective)
    infeasible, ok = study.trials
    assert stored_constraints(infeasible) == (0.5,) and stored_constraints(ok) == (-0.5,)
    assert [is_feasible(t.system_attrs) for t in study.trials] == [False, True]


def test_nan_is_refused() -> None:
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage)
    trial = study.ask()
    with pytest.raises(ValueError, match="must be numbers"):
        store_constraints(storage, trial_id_of(trial), [math.nan])
