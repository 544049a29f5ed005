"""A trial's constraint values, stored where Optuna's samplers and the dashboard read them.

The study loop stores each COMPLETE or PRUNED trial's values (:mod:`dvt_hpo.results.reduction`) in
the trial system attr Optuna names ``constraints`` BEFORE it tells the trial, whatever the
sampler: ``Study.best_trial(s)`` and optuna-dashboard then treat the trial as infeasible when
one value is ``> 0``. Optuna 5's samplers (TPE, NSGA-II/III, GP) read them themselves; under
Optuna 4 they get :func:`stored_constraints` as ``constraints_func``, which reads them back
(and which they write again, the same list, after the tell).

The list form under the plain ``constraints`` key is the one every supported Optuna (4.9 and 5,
which also reads named ``constraints:<key>`` attrs) and optuna-dashboard read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dvt_hpo.optuna_api.private import CONSTRAINTS_KEY

if TYPE_CHECKING:
    from dvt_hpo.spec.model import ConstraintSpec

__all__ = [
    "CONSTRAINTS_KEY",
    "constraint_value",
    "constraints_of",
    "feasible",
    "is_feasible",
    "store_constraints",
    "stored_constraints",
    "violation",
]


def constraints_of(system_attrs: Mapping[str, Any]) -> tuple[float, ...] | None:
    """The stored constraint values (``None`` when the trial has none)."""
    values = system_attrs.get(CONSTRAINTS_KEY)
    if not isinstance(values, (list, tuple)):
        return None
    return tuple(float(v) for v in values)


def stored_constraints(trial: Any) -> tuple[float, ...]:
    """The ``constraints_func`` given to samplers: the values stored before the tell."""
    return constraints_of(trial.system_attrs) or ()


def violation(system_attrs: Mapping[str, Any]) -> float:
    """How far a trial is from feasible: the sum of its positive constraint values (0 when
    feasible or unconstrained)."""
    return sum(max(0.0, v) for v in constraints_of(system_attrs) or ())


def feasible(values: Sequence[float]) -> bool:
    """Optuna's rule: every constraint value ``<= 0`` (none: feasible)."""
    return all(v <= 0.0 for v in values)


def is_feasible(system_attrs: Mapping[str, Any]) -> bool:
    return feasible(constraints_of(system_attrs) or ())


def store_constraints(storage: Any, trial_id: int, values: Sequence[float]) -> None:
    """Store ``values`` on the trial (finite numbers: NaN is never feasible nor comparable)."""
    checked = [float(v) for v in values]
    if any(math.isnan(v) for v in checked):
        raise ValueError(f"constraint values must be numbers, got {checked}")
    storage.set_trial_system_attr(trial_id, CONSTRAINTS_KEY, checked)


def constraint_value(constraint: ConstraintSpec, value: float) -> float:
    """Optuna's constraint value of ``value``: ``<= 0`` when feasible."""
    parts = []
    if constraint.max is not None:
        parts.append(value - constraint.max)
    if constraint.min is not None:
        parts.append(constraint.min - value)
    return max(parts)
