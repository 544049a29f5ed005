"""Search dimensions: dotted-path access, sampling with Optuna, conditions and signatures.

A dimension (:class:`dvt_hpo.spec.Dimension`) names one hyperparameter, its kind and range, and
the dotted ``path`` of the trainer config where a sampled value is written. ``when`` makes a
dimension conditional on the values of earlier ones: when the condition is false the dimension is
not suggested at all, so Optuna sees a dynamic search space (which TPE and random handle).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec import Condition, Dimension

__all__ = [
    "PathIndexError",
    "PathKeyError",
    "condition_holds",
    "diff_spaces",
    "distributions",
    "get_path",
    "grid_values",
    "apply",
    "parse_path",
    "same_value",
    "sample",
    "set_path",
    "space_signature",
]

_SEGMENT_RE = re.compile(r"^(?P<key>[^\[\]]*)(?P<indices>(?:\[-?\d+\])*)$")
_MISSING = object()


class PathKeyError(KeyError):
    """A dotted path names a key or attribute that does not exist (message names both)."""

    def __str__(self) -> str:
        # KeyError.__str__ would quote the message.
        return str(self.args[0]) if self.args else ""


class PathIndexError(IndexError):
    """A dotted path indexes past the end of a list (message names the path and the length)."""


def parse_path(path: str) -> list[str | int]:
    """``"a.b[0].c"`` or ``"a.b.0.c"`` -> ``["a", "b", 0, "c"]`` / ``["a", "b", "0", "c"]``.

    Bracketed indices become ints; a plain all-digit segment stays a string and is used as a
    list index only when it meets a list.
    """
    if not isinstance(path, str) or not path:
        raise PathKeyError(f"expected a non-empty dotted path, got {path!r}")
    parts: list[str | int] = []
    for raw in path.split("."):
        match = _SEGMENT_RE.match(raw)
        if match is None or (not match["key"] and not match["indices"]):
            raise PathKeyError(f"path {path!r}: malformed segment {raw!r}")
        if match["key"]:
            parts.append(match["key"])
        parts.extend(int(i) for i in re.findall(r"-?\d+", match["indices"]))
    return parts


def format_path(parts: Sequence[str | int]) -> str:
    """Inverse of :func:`parse_path`: ints become ``[i]``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else part
    return out


def _is_dataclass_instance(obj: Any) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


def _keys_hint(key: str, keys: Iterable[Any]) -> str:
    names = [str(k) for k in keys]
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
    return f"{hint} (keys there: {shown})" if names else f"{hint} (no keys there)"


def _where(parts: Sequence[str | int], i: int) -> str:
    return repr(format_path(parts[:i])) if i else "the top level"


def _step(obj: Any, part: str | int, parts: Sequence[str | int], i: int, path: str) -> Any:
    """``obj[part]`` (or attribute), or raise a path error naming ``path`` and the segment."""
    if isinstance(obj, (list, tuple)):
        if isinstance(part, str) and not part.lstrip("-").isdigit():
            raise PathKeyError(
                f"path {path!r}: {_where(parts, i)} is a list, so segment {part!r} must be an "
                f"index (0..{len(obj) - 1})"
            )
        index = int(part)
        if not -len(obj) <= index < len(obj):
            raise PathIndexError(
                f"path {path!r}: index {index} is out of range at {_where(parts, i)}, "
                f"a list of length {len(obj)}"
            )
        return obj[index]
    if isinstance(obj, Mapping):
        if part in obj:
            return obj[part]
        if isinstance(part, int) and str(part) in obj:
            return obj[str(part)]
        raise PathKeyError(
            f"path {path!r}: no key {str(part)!r} at {_where(parts, i)}"
            f"{_keys_hint(str(part), obj.keys())}"
        )
    if _is_dataclass_instance(obj):
        names = [f.name for f in dataclasses.fields(obj)]
        if isinstance(part, str) and part in names:
            return getattr(obj, part)
        raise PathKeyError(
            f"path {path!r}: {type(obj).__name__} at {_where(parts, i)} has no field "
            f"{str(part)!r}{_keys_hint(str(part), names)}"
        )
    raise PathKeyError(
        f"path {path!r}: cannot look up {str(part)!r} in {_where(parts, i)}, which is "
        f"{type(obj).__name__} {obj!r}, not a mapping, list or dataclass"
    )


def get_path(obj: Any, path: str) -> Any:
    """The value at dotted ``path`` of nested mappings, dataclass instances and lists.

    Raises :class:`PathKeyError` (a ``KeyError``) or :class:`PathIndexError` (an
    ``IndexError``) naming the full path and the failing segment.
    """
    parts = parse_path(path)
    node = obj
    for i, part in enumerate(parts):
        node = _step(node, part, parts, i, path)
    return node


def set_path(obj: Any, path: str, value: Any, *, create: bool = False) -> None:
    """Write ``value`` at dotted ``path`` in place.

    Mappings get the last key set (new or not); lists need an existing index; dataclass
    instances need an existing field (and must not be frozen). With ``create=True`` a missing
    (or ``None``) intermediate mapping entry becomes an empty dict, so that a path into an
    optional section that is off (``sched.warmup.steps`` with ``warmup: null``) switches it on.
    """
    parts = parse_path(path)
    node = obj
    for i, part in enumerate(parts[:-1]):
        if isinstance(node, dict) and create and node.get(part) is None:
            # A None value is an optional section left out: creating it is what the caller wants.
            node[part] = {}
        node = _step(node, part, parts, i, path)
    last = parts[-1]
    i = len(parts) - 1
    if isinstance(node, list):
        _step(node, last, parts, i, path)  # raises the right error for a bad index
        node[int(last)] = value
    elif isinstance(node, dict):
        node[last] = value
    elif _is_dataclass_instance(node):
        _step(node, last, parts, i, path)
        try:
            setattr(node, str(last), value)
        except dataclasses.FrozenInstanceError:
            raise TypeError(
                f"path {path!r}: {type(node).__name__} at {_where(parts, i)} is frozen; "
                "use dataclasses.replace or a dict"
            ) from None
    else:
        raise PathKeyError(
            f"path {path!r}: cannot set {str(last)!r} in {_where(parts, i)}, which is "
            f"{type(node).__name__} {node!r}, not a mapping, list or dataclass"
        )


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


def active_names(dimensions: Sequence[Dimension], params: Mapping[str, Any]) -> list[str]:
    """Names of the dimensions whose ``when`` holds for ``params`` (in order)."""
    return [d.name for d in dimensions if condition_holds(d.when, params)]


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
