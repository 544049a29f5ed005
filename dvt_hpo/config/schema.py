"""The one schema engine: typed dataclass trees <-> plain dicts, with field paths and did-you-mean.

Every section of study.yaml (:mod:`dvt_hpo.spec.model`) and every trainer config
(:mod:`dvt_hpo.train.config`) is described by a dataclass and checked here. Pure (stdlib only),
so the orchestrator validates configs without importing torch and the trial process can import
the models. The rules, shared by every conversion:

- unknown keys are rejected, with the closest valid name (``difflib``);
- an ``int`` is accepted where a ``float`` is expected (and stored as ``float``), a ``bool`` is
  never accepted as an ``int`` or ``float``;
- ``Literal`` values are checked; ``X | None`` accepts ``None``; ``Any`` accepts anything;
- a dataclass-typed field is given as a mapping (a nested section); ``None`` only when the
  field is optional;
- ``dict[str, Any]`` fields hold free keys (e.g. optimizer kwargs), whose values must be plain
  YAML/JSON data (str, int, float, bool, None, lists and mappings of those);
- a field declared with :func:`rule` also gets a range (``gt``, ``ge``, ``le``) and the study
  file's wording ("must be an integer >= 1 or null, got 0"); one declared with :func:`domain`
  is passed through raw, for code that checks what a type cannot say (storage URLs, devices).

Each field of a study file also carries what the reference says of it (:class:`FieldDoc`, the
``doc=`` of :func:`rule` and :func:`domain`): one sentence, and for a domain field what the file
may write there when the type does not say it. ``docs/`` generates the study.yaml reference
from these (:mod:`dvt_hpo.studyfile.reference`); a test fails on a field without a sentence.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Union

from dvt_hpo.config.hints import describe, did_you_mean
from dvt_hpo.exceptions import SpecError

__all__ = [
    "FieldDoc",
    "Rule",
    "allowed_text",
    "check_keys",
    "check_value",
    "defaults",
    "domain",
    "field_doc",
    "field_type_at",
    "from_mapping",
    "from_wire_mapping",
    "read_fields",
    "rule",
    "to_plain",
    "type_name",
    "value_fits_type",
]


@dataclass(frozen=True)
class Rule:
    """What a field's type cannot say: its range, its wording, or that code checks it."""

    gt: float | None = None
    ge: float | None = None
    le: float | None = None
    what: str | None = None  # strings: "a metric name" instead of "a non-empty string"
    domain: bool = False  # checked by code (URLs, devices, ...): the engine passes it raw


@dataclass(frozen=True)
class FieldDoc:
    """What the study.yaml reference says of a field: ``doc`` one sentence; ``accepts`` what
    the file may write when the field's type does not say it (a domain field); ``default``
    the default as the reference shows it when the loader computes it (``runs/<name>``)."""

    doc: str
    accepts: str | None = None
    default: str | None = None


def _metadata(rule_: Rule, doc: str | None, accepts: str | None, shown: str | None) -> dict:
    meta: dict[str, Any] = {"rule": rule_}
    if doc is not None:
        meta["doc"] = FieldDoc(doc, accepts, shown)
    return meta


def rule(
    default: Any = dataclasses.MISSING,
    *,
    doc: str | None = None,
    accepts: str | None = None,
    shown_default: str | None = None,
    **kwargs: Any,
) -> Any:
    """A dataclass field checked with :class:`Rule` ``(**kwargs)``; ``doc``: its sentence in
    the reference (:class:`FieldDoc`)."""
    return dataclasses.field(
        default=default, metadata=_metadata(Rule(**kwargs), doc, accepts, shown_default)
    )


def domain(
    default: Any = dataclasses.MISSING,
    *,
    default_factory: Any = dataclasses.MISSING,
    doc: str | None = None,
    accepts: str | None = None,
    shown_default: str | None = None,
) -> Any:
    """A dataclass field whose raw value is checked by code, not by the engine; ``doc``,
    ``accepts``, ``shown_default``: what the reference says of it (:class:`FieldDoc`)."""
    return dataclasses.field(
        default=default,
        default_factory=default_factory,
        metadata=_metadata(Rule(domain=True), doc, accepts, shown_default),
    )


def field_doc(f: dataclasses.Field) -> FieldDoc | None:
    """The reference's :class:`FieldDoc` of a dataclass field (``None``: not written yet)."""
    return f.metadata.get("doc")


_NONE_TYPE = type(None)
# True while converting data that crossed a process boundary (:func:`from_wire_mapping`).
_WIRE: contextvars.ContextVar[bool] = contextvars.ContextVar("dvt_hpo_schema_wire", default=False)
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


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _free_key_fields(cls: type) -> list[str]:
    hints = _hints(cls)
    return [
        f.name
        for f in dataclasses.fields(cls)
        if typing.get_origin(_unwrap_optional(hints[f.name])) in (dict, Mapping)
    ]


def _keys_hint(key: str, cls: type) -> str:
    """``; did you mean 'x'? (allowed keys: ...)`` for a key ``cls`` does not have."""
    allowed = [f.name for f in dataclasses.fields(cls) if f.init]
    hint = did_you_mean(key, allowed)
    free = _free_key_fields(cls)
    if not hint and len(free) == 1:
        # e.g. ``optim.lr`` for ``optim.optim_args.lr``: free keys live one level down.
        hint = f"; did you mean '{free[0]}.{key}'?"
    return f"{hint} (allowed keys: {', '.join(allowed)})"


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
                raise SpecError(f"keys must be strings, got {describe(k)}", file=source, field=path)
            out[k] = _plain_data(v, _join(path, k), source)
        return out
    raise SpecError(
        f"expected plain data (string, number, boolean, null, list or mapping), got "
        f"{describe(value)}; objects such as optimizer instances are not accepted, "
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
        raise SpecError(f"expected {type_name(tp)}, got {describe(value)}", file=source, field=path)
    if tp is _NONE_TYPE:
        if value is None:
            return None
        raise SpecError(f"expected null, got {describe(value)}", file=source, field=path)
    origin = typing.get_origin(tp)
    if origin is Literal:
        allowed = typing.get_args(tp)
        # ``True == 1``: compare types too so that a bool never passes for a numeric literal.
        if any(value == a and type(value) is type(a) for a in allowed):
            return value
        raise SpecError(
            f"expected one of {', '.join(repr(a) for a in allowed)}, got {describe(value)}",
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
                f"expected {type_name(tp)}, got {describe(value)}", file=source, field=path
            )
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        items = [_convert(v, inner, f"{path}[{i}]", source) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise SpecError(
                f"expected {type_name(tp)}, got {describe(value)}", file=source, field=path
            )
        args = typing.get_args(tp)
        inner = args[1] if len(args) == 2 else Any
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise SpecError(f"keys must be strings, got {describe(k)}", file=source, field=path)
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
    raise SpecError(f"expected {type_name(tp)}, got {describe(value)}", file=source, field=path)


def _bounds_text(r: Rule) -> str:
    pairs = ((">", r.gt), (">=", r.ge), ("<=", r.le))
    return " and ".join(f"{op} {v:g}" for op, v in pairs if v is not None)


def check_value(value: Any, tp: Any, r: Rule, path: str = "", source: str | None = None) -> Any:
    """``value`` against a scalar field of type ``tp`` with rule ``r``, in the study file's
    wording; returns it converted (an int given for a float becomes a float)."""
    null = _is_union(tp) and _NONE_TYPE in typing.get_args(tp)
    base = _unwrap_optional(tp)
    or_null = " or null" if null else ""

    def fail(rule_text: str, shown: str) -> SpecError:
        return SpecError(f"must be {rule_text}{or_null}, got {shown}", file=source, field=path)

    if value is None and null:
        return None
    bounds = _bounds_text(r)
    if base is bool:
        if not isinstance(value, bool):
            raise fail("true or false", describe(value))
        return value
    if base is int:
        text = "an integer" + (f" {bounds}" if bounds else "")
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail(text, describe(value))
        if not _in_bounds(value, r):
            raise fail(text, str(value))
        return value
    if base is float:
        text = "a number" + (f" {bounds}" if bounds else "")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fail(text, describe(value))
        if not math.isfinite(value) or not _in_bounds(value, r):
            raise fail(text, repr(value))
        return float(value)
    if base is str:
        if not isinstance(value, str) or not value.strip():
            raise fail(r.what or "a non-empty string", describe(value))
        return value
    if typing.get_origin(base) is Literal:
        allowed = [str(a) for a in typing.get_args(base)]
        if not isinstance(value, str) or value not in allowed:
            hint = did_you_mean(value, allowed) if isinstance(value, str) else ""
            raise fail(f"one of {', '.join(allowed)}", describe(value) + hint)
        return value
    raise TypeError(f"rule() does not apply to {tp!r} at {path!r}")


def allowed_text(tp: Any, r: Rule) -> str:
    """What a :func:`rule` field allows, in :func:`check_value`'s words ("an integer >= 1 or
    null"): the reference's "allowed" column."""
    null = " or null" if _is_union(tp) and _NONE_TYPE in typing.get_args(tp) else ""
    base = _unwrap_optional(tp)
    bounds = _bounds_text(r)
    if base is bool:
        text = "true or false"
    elif base is int:
        text = "an integer" + (f" {bounds}" if bounds else "")
    elif base is float:
        text = "a number" + (f" {bounds}" if bounds else "")
    elif base is str:
        text = r.what or "a non-empty string"
    elif typing.get_origin(base) is Literal:
        text = "one of " + ", ".join(str(a) for a in typing.get_args(base))
    else:
        text = type_name(base)
    return text + null


def _in_bounds(value: float, r: Rule) -> bool:
    return (
        (r.gt is None or value > r.gt)
        and (r.ge is None or value >= r.ge)
        and (r.le is None or value <= r.le)
    )


def _rules(cls: type) -> dict[str, Rule | None]:
    return {f.name: f.metadata.get("rule") for f in dataclasses.fields(cls) if f.init}


def check_keys(
    cls: type, data: Any, *, source: str | None = None, path: str = "", what: str | None = None
) -> Mapping[str, Any]:
    """``data`` is a mapping whose keys are all fields of ``cls`` (``None`` counts as empty).

    ``what`` names the section in messages ("section 'study'"); without it a non-mapping is
    reported as the expected type.
    """
    if data is None and what is not None:
        return {}
    if not isinstance(data, Mapping):
        message = (
            f"{what} must be a mapping, got {describe(data)}"
            if what is not None
            else f"expected {type_name(cls)}, got {describe(data)}"
        )
        raise SpecError(message, file=source, field=path or None)
    names = _rules(cls)
    for key in data:
        if not isinstance(key, str) or key not in names:
            where = f" in {what}" if what is not None else ""
            raise SpecError(
                f"unknown key {key!r}{where}{_keys_hint(str(key), cls)}",
                file=source,
                field=_join(path, str(key)),
            )
    return data


def read_fields(
    cls: type, data: Any, *, source: str | None = None, path: str = "", what: str | None = None
) -> dict[str, Any]:
    """The given fields of ``data`` checked and converted for ``cls`` (domain fields raw).

    Errors are :class:`SpecError` naming ``source`` and the dotted field (``path.key``).
    A required non-domain field that is missing is an error; defaults are not filled in
    (see :func:`defaults`).
    """
    data = check_keys(cls, data, source=source, path=path, what=what)
    hints = _hints(cls)
    rules = _rules(cls)
    out: dict[str, Any] = {}
    for key, value in data.items():
        r = rules[key]
        field_path = _join(path, key)
        if _WIRE.get():
            # What crossed a process boundary was checked when its study file was loaded:
            # here its shape only (keys and JSON types), not the study file's value rules.
            out[key] = _convert(value, hints[key], field_path, source)
        elif r is not None and r.domain:
            out[key] = value
        elif r is not None:
            out[key] = check_value(value, hints[key], r, field_path, source)
        else:
            out[key] = _convert(value, hints[key], field_path, source)
    for f in dataclasses.fields(cls):
        r = rules.get(f.name)
        if (
            f.init
            and f.name not in out
            and not (r is not None and r.domain and not _WIRE.get())
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ):
            where = f" in {what}" if what is not None else ""
            raise SpecError(
                f"missing required key {f.name!r}{where}", file=source, field=_join(path, f.name)
            )
    return out


def defaults(cls: type) -> dict[str, Any]:
    """The default of every field of ``cls`` that has one."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def from_mapping(cls: type, data: Any, *, source: str | None = None, path: str = "") -> Any:
    """Build dataclass ``cls`` from a mapping, strictly (see the module docstring).

    Errors are :class:`SpecError` naming ``source`` and the dotted field. A ``SpecError`` raised
    by the dataclass's own ``__post_init__`` (a value rule such as ``epochs >= 1``) gets the
    section's path prefixed to its field.
    """
    kwargs = read_fields(cls, data, source=source, path=path)
    try:
        return cls(**kwargs)
    except SpecError as exc:
        field = _join(path, exc.field) if exc.field else (path or None)
        raise SpecError(exc.message, file=source, line=exc.line, field=field) from None
    except (TypeError, ValueError) as exc:
        if not _WIRE.get():
            raise
        # A message's section that its own check refuses (``__post_init__``): name where.
        raise SpecError(str(exc), file=source, field=path or None) from None


def from_wire_mapping(cls: type, data: Any, where: str, error: type[Exception] = ValueError) -> Any:
    """Build ``cls`` from JSON that crossed a process boundary (a protocol message, the trial
    payload, a section given by hand): the same rules as :func:`from_mapping`, raised as
    ``error("<where>: <field>: <rule>")``, since such data has no file or line to point at.
    Only the shape is checked (keys and types, domain fields included): the values were checked
    against the study file's rules when it was loaded."""
    token = _WIRE.set(True)
    try:
        return from_mapping(cls, data)
    except SpecError as exc:
        # "unknown key 'x'" and "missing required key 'x'" name the key: point at its section.
        parent, _, key = (exc.field or "").rpartition(".")
        shown = parent if key and f"'{key}'" in exc.message else exc.field
        at = f" {shown}" if shown else ""
        raise error(f"{where}{at}: {exc.message}") from None
    except error:
        raise
    except (TypeError, ValueError) as exc:
        # A dataclass's own check of its values (``__post_init__``).
        raise error(f"{where}: {exc}") from None
    finally:
        _WIRE.reset(token)


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
                raise KeyError(f"no field {part!r} in {where}{_keys_hint(part, node)}")
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
