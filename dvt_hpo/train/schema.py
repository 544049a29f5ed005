"""Typed dataclass trees <-> plain dicts: strict conversion, type checks and dotted-path look-ups.

Pure (stdlib only), so the orchestrator can validate trainer configs and search paths without
importing torch. The rules, shared by every conversion:

- unknown keys are rejected, with the closest valid name (``difflib``);
- an ``int`` is accepted where a ``float`` is expected (and stored as ``float``), a ``bool`` is
  never accepted as an ``int`` or ``float``;
- ``Literal`` values are checked; ``X | None`` accepts ``None``; ``Any`` accepts anything;
- a dataclass-typed field is given as a mapping (a nested section); ``None`` only when the
  field is optional;
- ``dict[str, Any]`` fields hold free keys (e.g. optimizer kwargs), whose values must be plain
  YAML/JSON data (str, int, float, bool, None, lists and mappings of those).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union

from dvt_hpo.exceptions import SpecError

__all__ = [
    "field_type_at",
    "from_mapping",
    "to_plain",
    "type_name",
    "value_fits_type",
]

_NONE_TYPE = type(None)
_PLAIN_SCALARS = (str, int, float, bool, _NONE_TYPE)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    # Annotations are strings under ``from __future__ import annotations``; resolve them once.
    return typing.get_type_hints(cls)


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _unwrap_optional(tp: Any) -> Any:
    """``X | None`` -> ``X`` when exactly one non-None member is left, else ``tp`` unchanged."""
    if _is_union(tp):
        members = [a for a in typing.get_args(tp) if a is not _NONE_TYPE]
        if len(members) == 1:
            return members[0]
    return tp


def type_name(tp: Any) -> str:
    """A short, readable name for a type annotation (used in error messages)."""
    if tp is Any:
        return "any value"
    if tp is _NONE_TYPE:
        return "null"
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return f"a mapping ({tp.__name__})"
    if isinstance(tp, type):
        return tp.__name__
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if _is_union(tp):
        return " or ".join(type_name(a) for a in args)
    if origin in (list, tuple):
        inner = type_name(args[0]) if args else "any value"
        return f"a list of {inner}"
    if origin in (dict, Mapping):
        inner = type_name(args[1]) if len(args) == 2 else "any value"
        return f"a mapping of {inner}"
    return str(tp)


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _free_key_fields(cls: type) -> list[str]:
    hints = _hints(cls)
    return [
        f.name
        for f in dataclasses.fields(cls)
        if typing.get_origin(_unwrap_optional(hints[f.name])) in (dict, Mapping)
    ]


def _did_you_mean(key: str, cls: type) -> str:
    allowed = [f.name for f in dataclasses.fields(cls) if f.init]
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    free = _free_key_fields(cls)
    if close:
        hint = f"did you mean {close[0]!r}? "
    elif len(free) == 1:
        # e.g. ``optim.lr`` for ``optim.optim_args.lr``: free keys live one level down.
        hint = f"did you mean '{free[0]}.{key}'? "
    else:
        hint = ""
    return f"{hint}allowed keys: {', '.join(allowed)}"


def _plain_data(value: Any, path: str, source: str | None) -> Any:
    """Check that ``value`` is plain YAML/JSON data; returns a copy with tuples as lists."""
    if isinstance(value, _PLAIN_SCALARS):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain_data(v, f"{path}[{i}]", source) for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise SpecError(
                    f"keys must be strings, got {_describe(k)}", file=source, field=path
                )
            out[k] = _plain_data(v, _join(path, k), source)
        return out
    raise SpecError(
        f"expected plain data (string, number, boolean, null, list or mapping), got "
        f"{_describe(value)}; objects such as optimizer instances are not accepted, "
        "name them by an importable target string instead",
        file=source,
        field=path,
    )


def _convert(value: Any, tp: Any, path: str, source: str | None) -> Any:
    """Check ``value`` against annotation ``tp`` and return it converted (sections built)."""
    if tp is Any:
        return _plain_data(value, path, source)
    if _is_union(tp):
        args = typing.get_args(tp)
        if value is None:
            if _NONE_TYPE in args:
                return None
            raise SpecError(f"expected {type_name(tp)}, got null", file=source, field=path)
        members = [a for a in args if a is not _NONE_TYPE]
        if len(members) == 1:
            return _convert(value, members[0], path, source)
        for member in members:
            try:
                return _convert(value, member, path, source)
            except SpecError:
                continue
        raise SpecError(
            f"expected {type_name(tp)}, got {_describe(value)}", file=source, field=path
        )
    if tp is _NONE_TYPE:
        if value is None:
            return None
        raise SpecError(f"expected null, got {_describe(value)}", file=source, field=path)
    origin = typing.get_origin(tp)
    if origin is Literal:
        allowed = typing.get_args(tp)
        # ``True == 1``: compare types too so that a bool never passes for a numeric literal.
        if any(value == a and type(value) is type(a) for a in allowed):
            return value
        raise SpecError(
            f"expected one of {', '.join(repr(a) for a in allowed)}, got {_describe(value)}",
            file=source,
            field=path,
        )
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if value is None:
            raise SpecError(
                f"expected {type_name(tp)}, got null (this section is not optional)",
                file=source,
                field=path,
            )
        return from_mapping(tp, value, source=source, path=path)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise SpecError(
                f"expected {type_name(tp)}, got {_describe(value)}", file=source, field=path
            )
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        items = [_convert(v, inner, f"{path}[{i}]", source) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise SpecError(
                f"expected {type_name(tp)}, got {_describe(value)}", file=source, field=path
            )
        args = typing.get_args(tp)
        inner = args[1] if len(args) == 2 else Any
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise SpecError(
                    f"keys must be strings, got {_describe(k)}", file=source, field=path
                )
            out[k] = _convert(v, inner, _join(path, k), source)
        return out
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif isinstance(tp, type):
        if isinstance(value, tp):
            return value
    else:
        raise TypeError(f"unsupported annotation {tp!r} at {path!r}")
    raise SpecError(f"expected {type_name(tp)}, got {_describe(value)}", file=source, field=path)


def from_mapping(cls: type, data: Any, *, source: str | None = None, path: str = "") -> Any:
    """Build dataclass ``cls`` from a mapping, strictly (see the module docstring).

    Errors are :class:`SpecError` naming ``source`` and the dotted field. A ``SpecError`` raised
    by the dataclass's own ``__post_init__`` (a value rule such as ``epochs >= 1``) gets the
    section's path prefixed to its field.
    """
    if not isinstance(data, Mapping):
        raise SpecError(
            f"expected {type_name(cls)}, got {_describe(data)}", file=source, field=path or None
        )
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str) or key not in fields:
            key_text = key if isinstance(key, str) else repr(key)
            raise SpecError(
                f"unknown key {key_text!r}; {_did_you_mean(str(key), cls)}",
                file=source,
                field=_join(path, str(key)),
            )
        kwargs[key] = _convert(value, hints[key], _join(path, key), source)
    missing = [
        name
        for name, f in fields.items()
        if name not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise SpecError(
            f"missing required key {missing[0]!r}", file=source, field=_join(path, missing[0])
        )
    try:
        return cls(**kwargs)
    except SpecError as exc:
        field = _join(path, exc.field) if exc.field else (path or None)
        raise SpecError(exc.message, file=source, line=exc.line, field=field) from None


def to_plain(obj: Any) -> Any:
    """A dataclass tree -> plain dicts/lists/scalars (JSON and YAML safe)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    return obj


def field_type_at(schema: type, path: str) -> Any:
    """The type annotation at dotted ``path`` of dataclass ``schema``.

    ``Optional`` sections are unwrapped on the way down (the returned leaf keeps its
    ``| None``). Sub-keys of a ``dict[str, V]`` field are free and give ``V`` (``Any`` for
    ``dict[str, Any]``); anything below ``Any`` is ``Any``. Raises ``KeyError`` naming the
    closest valid names when the path does not exist.
    """
    if not path:
        raise KeyError("empty path")
    tp: Any = schema
    walked: list[str] = []
    for part in path.split("."):
        node = _unwrap_optional(tp)
        if node is Any:
            return Any
        origin = typing.get_origin(node)
        if origin in (dict, Mapping):
            args = typing.get_args(node)
            tp = args[1] if len(args) == 2 else Any
        elif isinstance(node, type) and dataclasses.is_dataclass(node):
            hints = _hints(node)
            names = [f.name for f in dataclasses.fields(node) if f.init]
            if part not in names:
                where = ".".join(walked) or node.__name__
                raise KeyError(f"no field {part!r} in {where}; {_did_you_mean(part, node)}")
            tp = hints[part]
        else:
            where = ".".join(walked)
            raise KeyError(f"{where!r} is {type_name(tp)} and has no sub-key {part!r}")
        walked.append(part)
    return tp


def value_fits_type(value: Any, tp: Any) -> bool:
    """Whether ``value`` is accepted at a field annotated ``tp`` (same rules as the loader)."""
    try:
        _convert(value, tp, "", None)
    except SpecError:
        return False
    return True
