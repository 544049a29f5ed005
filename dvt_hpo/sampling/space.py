"""Search dimensions: sampling with Optuna, conditions, writing samples into a config, signatures.

A dimension (:class:`dvt_hpo.spec.model.Dimension`) names one hyperparameter, its kind and range, and
the dotted ``path`` of the trainer config where a sampled value is written. ``when`` makes a
dimension conditional on the values of earlier ones: when the condition is false the dimension is
not suggested at all, so Optuna sees a dynamic search space (which TPE and random handle).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from dvt_hpo.config.paths import set_path

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec.model import Condition, Dimension

__all__ = [
    "apply",
    "condition_holds",
    "diff_spaces",
    "distribution",
    "distributions",
    "grid_size",
    "grid_values",
    "same_value",
    "sample",
    "space_signature",
]

_MISSING = object()


def same_value(a: Any, b: Any) -> bool:
    """Equality that never mixes booleans with numbers (``True == 1`` in Python)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return False
    return a == b


def condition_holds(condition: Condition | None, params: Mapping[str, Any]) -> bool:
    """Whether every dimension named in ``condition`` was sampled with one of its values."""
    if condition is None:
        return True
    for name, allowed in condition.equals.items():
        if name not in params:
            return False
        if not any(same_value(params[name], value) for value in allowed):
            return False
    return True


def sample(trial: optuna.Trial, dimensions: Sequence[Dimension]) -> dict[str, Any]:
    """Suggest every dimension whose ``when`` holds, in order; returns ``{name: value}``."""
    params: dict[str, Any] = {}
    for dim in dimensions:
        if not condition_holds(dim.when, params):
            continue
        if dim.kind == "float":
            params[dim.name] = trial.suggest_float(
                dim.name, float(dim.low), float(dim.high), step=dim.step, log=dim.log
            )
        elif dim.kind == "int":
            params[dim.name] = trial.suggest_int(
                dim.name, int(dim.low), int(dim.high), step=int(dim.step or 1), log=dim.log
            )
        elif dim.kind == "categorical":
            params[dim.name] = trial.suggest_categorical(dim.name, list(dim.choices or ()))
        elif dim.kind == "bool":
            params[dim.name] = trial.suggest_categorical(dim.name, [False, True])
        else:
            raise ValueError(f"dimension {dim.name!r}: unknown kind {dim.kind!r}")
    return params


def apply(
    config: Mapping[str, Any], dimensions: Sequence[Dimension], params: Mapping[str, Any]
) -> dict[str, Any]:
    """A deep copy of ``config`` with each sampled param written at its dimension's path.

    Dimensions absent from ``params`` (condition false) leave the config's value alone.
    Missing or ``None`` intermediate sections are created (see :func:`set_path`).
    """
    out = copy.deepcopy(dict(config))
    for dim in dimensions:
        if dim.name in params:
            set_path(out, dim.path, params[dim.name], create=True)
    return out


def distribution(dim: Dimension) -> BaseDistribution:
    """The Optuna distribution that :func:`sample` suggests for ``dim``."""
    if dim.kind == "float":
        return FloatDistribution(float(dim.low), float(dim.high), log=dim.log, step=dim.step)
    if dim.kind == "int":
        return IntDistribution(int(dim.low), int(dim.high), log=dim.log, step=int(dim.step or 1))
    if dim.kind == "categorical":
        return CategoricalDistribution(list(dim.choices or ()))
    if dim.kind == "bool":
        return CategoricalDistribution([False, True])
    raise ValueError(f"dimension {dim.name!r}: unknown kind {dim.kind!r}")


def distributions(dimensions: Sequence[Dimension]) -> dict[str, BaseDistribution]:
    """``{name: optuna distribution}`` for every dimension (conditional ones included)."""
    return {dim.name: distribution(dim) for dim in dimensions}


def grid_values(dim: Dimension) -> list[Any] | None:
    """Every value ``dim`` can take, or ``None`` when it is continuous (a float without step).

    Float steps are added in decimal so that ``0.1`` steps give ``0.3``, not
    ``0.30000000000000004`` (a grid value must be exactly what the trial reports).
    """
    if dim.kind == "categorical":
        return list(dim.choices or ())
    if dim.kind == "bool":
        return [False, True]
    if dim.kind == "int":
        return list(range(int(dim.low), int(dim.high) + 1, int(dim.step or 1)))
    if dim.kind == "float":
        if dim.step is None:
            return None
        low, high, step = (Decimal(repr(float(v))) for v in (dim.low, dim.high, dim.step))
        count = int((high - low) / step) + 1
        return [float(low + i * step) for i in range(count)]
    raise ValueError(f"dimension {dim.name!r}: unknown kind {dim.kind!r}")


def grid_size(dim: Dimension) -> int | None:
    """``len(grid_values(dim))`` without building the list (``None`` when continuous)."""
    if dim.kind == "categorical":
        return len(dim.choices or ())
    if dim.kind == "bool":
        return 2
    if dim.kind == "int":
        return len(range(int(dim.low), int(dim.high) + 1, int(dim.step or 1)))
    if dim.kind == "float":
        if dim.step is None:
            return None
        low, high, step = (Decimal(repr(float(v))) for v in (dim.low, dim.high, dim.step))
        return int((high - low) / step) + 1
    raise ValueError(f"dimension {dim.name!r}: unknown kind {dim.kind!r}")


def _json_value(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_json_value(v) for v in value]
    return value


def space_signature(dimensions: Sequence[Dimension]) -> dict[str, Any]:
    """A JSON-safe description of the space, stored with the study and compared on resume.

    ``{"version": 1, "dimensions": {name: {kind, path, low, high, step, log, choices, when}}}``
    in declaration order; fields that do not apply to a kind are left out.
    """
    dims: dict[str, Any] = {}
    for dim in dimensions:
        entry: dict[str, Any] = {"kind": dim.kind, "path": dim.path}
        if dim.kind in ("float", "int"):
            entry.update(low=dim.low, high=dim.high, step=dim.step, log=dim.log)
        if dim.kind == "categorical":
            entry["choices"] = _json_value(dim.choices)
        if dim.when is not None:
            entry["when"] = {k: _json_value(v) for k, v in dim.when.equals.items()}
        dims[dim.name] = entry
    return {"version": 1, "dimensions": dims}


_FIELD_ORDER = ("kind", "path", "low", "high", "step", "log", "choices", "when")


def _show(value: Any) -> str:
    if value is _MISSING:
        return "(none)"
    if isinstance(value, str):
        return value
    return repr(value) if not isinstance(value, (list, dict)) else _compact(value)


def _compact(value: Any) -> str:
    import json

    return json.dumps(value, sort_keys=True)


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if a is _MISSING or b is _MISSING:
        return a is b
    return same_value(a, b)


def diff_spaces(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Human-readable differences between two :func:`space_signature` results.

    E.g. ``["lr: high 0.1 -> 0.5", "width: added", "depth: removed"]``; empty when the spaces
    are the same (declaration order is not compared: Optuna does not depend on it).
    """
    old_dims: Mapping[str, Any] = old.get("dimensions", {})
    new_dims: Mapping[str, Any] = new.get("dimensions", {})
    changes: list[str] = []
    for name, old_entry in old_dims.items():
        if name not in new_dims:
            changes.append(f"{name}: removed")
            continue
        new_entry = new_dims[name]
        keys = [k for k in _FIELD_ORDER if k in old_entry or k in new_entry]
        keys += sorted((set(old_entry) | set(new_entry)) - set(_FIELD_ORDER))
        for key in keys:
            before = old_entry.get(key, _MISSING)
            after = new_entry.get(key, _MISSING)
            if not _json_equal(before, after):
                changes.append(f"{name}: {key} {_show(before)} -> {_show(after)}")
    for name in new_dims:
        if name not in old_dims:
            changes.append(f"{name}: added")
    return changes
