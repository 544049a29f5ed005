"""From a trial's per-epoch history to the values Optuna records: its objectives and its
constraint values, all read from ONE epoch.

Pure (stdlib only), so every rule is tested as a table. The rules:

- the epoch: among the epochs that reported every objective as a finite number, ``reduce:
  last`` takes the last one and ``reduce: best`` the one best on the FIRST objective (the
  earliest on a tie). With one objective this is today's rule (the best or last finite value).
  Values of several objectives never come from different epochs: a trade-off between macro-F1
  and latency is only real when both were measured on the same model;
- a constraint's value: the chosen epoch's; when that epoch did not report it, the last epoch
  that did (a trainer may measure ``n_params`` once, at epoch 0), then the final metrics the
  trainer returned; never reported: the trial fails, naming the constraint metric;
- a constraint's value as Optuna stores it (feasible when ``<= 0``): ``value - max`` for a
  ``max``, ``min - value`` for a ``min``, the larger of the two when both are given.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dvt_hpo.config.hints import did_you_mean
from dvt_hpo.sampling.constraints import constraint_value
from dvt_hpo.spec.model import ConstraintSpec

History = Sequence[tuple[int, Mapping[str, float]]]
# A pruned trial's constraint that was never reported: infeasible, ranked after every known
# violation.
UNKNOWN_VIOLATION = sys.float_info.max

__all__ = [
    "UNKNOWN_VIOLATION",
    "Reduced",
    "choose_epoch",
    "constraint_value",
    "missing_objective_reason",
    "reduce_trial",
]


@dataclass(frozen=True)
class Reduced:
    """What a finished trial records: its values, or why it cannot record any."""

    step: int | None = None  # the chosen epoch's step
    values: tuple[float, ...] = ()  # one per objective, in the study's order
    constraints: tuple[float, ...] = ()  # Optuna's convention: <= 0 is feasible
    failure: str | None = None  # the FAIL reason when the trial cannot be recorded COMPLETE
    diverged: tuple[int, str, float] | None = None  # (step, metric, value) of a NaN objective


def _finite(metrics: Mapping[str, float], name: str) -> float | None:
    value = metrics.get(name)
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def choose_epoch(history: History, names: Sequence[str], direction: str, reduce: str) -> int | None:
    """The index in ``history`` of the epoch the trial's values come from (``None`` when no
    epoch reported every objective as a finite number)."""
    complete = [
        i for i, (_, m) in enumerate(history) if all(_finite(m, n) is not None for n in names)
    ]
    if not complete:
        return None
    if reduce == "last":
        return complete[-1]
    sign = 1.0 if direction == "maximize" else -1.0
    best = complete[0]
    for i in complete[1:]:
        if sign * _finite(history[i][1], names[0]) > sign * _finite(history[best][1], names[0]):  # type: ignore[operator]
            best = i
    return best


def missing_objective_reason(history: History, names: Sequence[str]) -> Reduced:
    """Why no epoch can be chosen: an objective reported only as NaN/inf (diverged), never
    reported, or the objectives never reported together in one epoch."""
    reported = sorted({k for _, m in history for k in m})
    for name in names:
        seen = [(s, m[name]) for s, m in history if name in m and m[name] is not None]
        finite = [v for _, v in seen if _finite({name: v}, name) is not None]
        if seen and not finite:
            step, bad = seen[0]
            return Reduced(diverged=(step, name, float(bad)))
        if not seen:
            field = "objective.metric" if len(names) == 1 else "objective"
            return Reduced(
                failure=f"{field} {name!r} was never reported; the trial reported "
                f"{reported if reported else 'no metrics'}{did_you_mean(name, reported)}"
            )
    return Reduced(
        failure=f"the objectives {list(names)} were never all reported (as finite numbers) in "
        "the same epoch; their values must come from one epoch"
    )


def _constraint_metric(
    history: History, chosen: int | None, metric: str, final: Mapping[str, float] | None
) -> float | None:
    if chosen is not None and (value := _finite(history[chosen][1], metric)) is not None:
        return value
    for _, metrics in reversed(history):
        if (value := _finite(metrics, metric)) is not None:
            return value
    return _finite(final, metric) if final else None


def reduce_trial(
    history: History,
    names: Sequence[str],
    direction: str,
    reduce: str,
    constraints: Sequence[ConstraintSpec] = (),
    final: Mapping[str, float] | None = None,
    *,
    need_objectives: bool = True,
) -> Reduced:
    """The trial's values and constraint values (see the module's rules). With
    ``need_objectives=False`` (a pruned trial) only the constraints are read, from the last
    epoch reporting each; a constraint never reported then counts as violated by
    :data:`UNKNOWN_VIOLATION` (samplers need a number for every constraint; JSON, and so the
    dashboard, has no infinity)."""
    chosen = choose_epoch(history, names, direction, reduce) if need_objectives else None
    if need_objectives and chosen is None:
        return missing_objective_reason(history, names)
    values: tuple[float, ...] = ()
    step = None
    if chosen is not None:
        step = history[chosen][0]
        values = tuple(float(history[chosen][1][n]) for n in names)
    reported = sorted({k for _, m in history for k in m} | set(final or {}))
    out: list[float] = []
    for constraint in constraints:
        value = _constraint_metric(history, chosen, constraint.metric, final)
        if value is None:
            if not need_objectives:
                out.append(UNKNOWN_VIOLATION)
                continue
            return Reduced(
                step=step,
                values=values,
                failure=f"constraint metric {constraint.metric!r} was never reported as a "
                f"finite number; the trial reported {reported if reported else 'no metrics'}"
                f"{did_you_mean(constraint.metric, reported)}",
            )
        out.append(constraint_value(constraint, value))
    return Reduced(step=step, values=values, constraints=tuple(out))
