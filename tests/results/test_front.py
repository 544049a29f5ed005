"""The best feasible trial, the feasible Pareto front and the closest infeasible trial, checked
against Optuna's own ``best_trial(s)`` on the same stored constraint values."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import optuna
import pytest

from dvt_hpo.results.front import no_feasible_message, pareto_front, select_best, study_ended
from dvt_hpo.sampling.constraints import CONSTRAINTS_KEY, is_feasible, stored_constraints, violation
from dvt_hpo.sampling.optuna_factory import build_sampler, samplers_read_constraints
from dvt_hpo.spec.model import Dimension, SamplerSpec

optuna.logging.set_verbosity(optuna.logging.WARNING)


def trial(number: int, values: Sequence[float], constraints: Sequence[float] | None = None) -> Any:
    attrs = {} if constraints is None else {CONSTRAINTS_KEY: list(constraints)}
    made = optuna.trial.create_trial(values=list(values), system_attrs=attrs)
    made.number = number
    return made


def test_the_key_is_the_one_optuna_reads() -> None:
    made = trial(0, [1.0], [0.5, -1.0])
    assert made.system_attrs[CONSTRAINTS_KEY] == [0.5, -1.0]
    assert not is_feasible(made.system_attrs) and violation(made.system_attrs) == 0.5
    assert stored_constraints(made) == (0.5, -1.0)
    assert stored_constraints(trial(1, [1.0])) == ()


def test_single_objective_best_is_the_best_feasible() -> None:
    trials = [trial(0, [0.9], [1.0]), trial(1, [0.7], [0.0]), trial(2, [0.8], [-2.0])]
    best = select_best(trials, ["maximize"])
    assert [t.number for t in best.trials] == [2] and not best.none_feasible


def test_no_feasible_trial_names_the_closest() -> None:
    trials = [trial(0, [0.9], [5.0, 1.0]), trial(1, [0.1], [0.5, -1.0]), trial(2, [0.2], [3.0, 0])]
    best = select_best(trials, ["maximize"])
    assert best.trials == () and best.none_feasible and best.closest.number == 1
    assert no_feasible_message(best, "s", ["n_params", "mem"]) == (
        "study 's' has 3 complete trial(s) and none meets objective.constraints; the closest "
        "is trial 1 (n_params over by 0.5)"
    )


def test_no_complete_trial_is_not_infeasible() -> None:
    assert not select_best([], ["maximize"]).none_feasible


def test_front_of_two_objectives() -> None:
    trials = [
        trial(0, [0.9, 5.0]),
        trial(1, [0.8, 2.0]),
        trial(2, [0.7, 3.0]),  # dominated by 1
        trial(3, [0.8, 2.0]),  # equal to 1: both on the front
        trial(4, [0.95, 9.0], [1.0]),  # best on f1 but infeasible
    ]
    best = select_best(trials, ["maximize", "minimize"])
    assert [t.number for t in best.trials] == [0, 1, 3]  # best first on f1; ties by number


@pytest.mark.parametrize(
    "directions", [["minimize", "maximize"], ["maximize", "maximize", "minimize"]]
)
def test_front_matches_optunas_best_trials(directions: list[str]) -> None:
    rng = random.Random(3)
    study = optuna.create_study(directions=directions)
    for _ in range(200):
        t = study.ask()
        t.storage.set_trial_system_attr(t._trial_id, CONSTRAINTS_KEY, [rng.uniform(-1, 0.3)])
        study.tell(t, [round(rng.uniform(0, 1), 2) for _ in directions])
    ours = select_best(study.get_trials(), directions)
    assert sorted(t.number for t in ours.trials) == sorted(t.number for t in study.best_trials)
    # Read along the trade-off: best first on the first objective.
    first = [t.values[0] for t in ours.trials]
    assert first == sorted(first, reverse=directions[0] == "maximize")
    assert all(is_feasible(t.system_attrs) for t in ours.trials)
    assert [t.number for t in pareto_front(study.get_trials(), directions)]  # not empty


@pytest.mark.parametrize("kind", ["tpe", "nsga2", "nsga3"])
def test_samplers_read_the_stored_constraints(kind: str) -> None:
    """A constrained NSGA-II/TPE study told through dvt-hpo's order (constraints stored, then
    tell) keeps the stored values and samples on."""
    dims = [Dimension(name="x", kind="float", path="x", low=0.0, high=1.0)]
    sampler = build_sampler(SamplerSpec(kind, {"seed": 0}), dims, constrained=True)
    # Optuna 5 samplers read the stored values themselves; Optuna 4 ones through the function.
    expected = None if samplers_read_constraints() else stored_constraints
    assert sampler._constraints_func is expected
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    for _ in range(12):
        t = study.ask()
        x = t.suggest_float("x", 0.0, 1.0)
        t.storage.set_trial_system_attr(t._trial_id, CONSTRAINTS_KEY, [x - 0.5])
        study.tell(t, [x, 1 - x])
    assert all(
        tuple(t.system_attrs[CONSTRAINTS_KEY]) == (t.params["x"] - 0.5,) for t in study.trials
    )
    assert all(t.params["x"] <= 0.5 for t in study.best_trials)


def test_the_study_ended_event_names_the_best_or_the_front() -> None:
    pruned = optuna.trial.create_trial(state=optuna.trial.TrialState.PRUNED)
    one = [trial(0, [0.2]), trial(1, [0.9]), pruned]
    event = study_ended(one, ["maximize"], 0)
    assert (event.n_done, event.best_value, event.best_number, event.front) == (3, 0.9, 1, ())
    two = [trial(0, [0.2, 1.0]), trial(1, [0.9, 2.0]), trial(2, [0.1, 3.0])]
    event = study_ended(two, ["maximize", "minimize"], 1)
    assert (event.best_value, event.front, event.exit_code) == (None, (1, 0), 1)
    assert study_ended([], ["maximize"], 2).best_number is None
