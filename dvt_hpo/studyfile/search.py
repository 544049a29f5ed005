"""Section ``search_space``: dimensions, their ``when`` conditions, and their paths checked
against the trainer config.

Each dimension's kind and ``log`` are plain fields (schema engine); ranges, steps and choices
depend on the kind and are checked here, with Optuna's own distribution as the last word. A
path must exist in the trainer's schema (or its config, without one) and every value the
dimension can produce must be accepted there, by type and by the config's own rules.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence, Set
from typing import Any

from dvt_hpo.command.template import placeholders
from dvt_hpo.config.hints import describe, did_you_mean
from dvt_hpo.config.paths import format_path, get_path, parse_path, set_path
from dvt_hpo.config.schema import from_mapping, type_name, value_fits_type
from dvt_hpo.config.source import Key
from dvt_hpo.exceptions import SpecError
from dvt_hpo.sampling import space
from dvt_hpo.spec.model import Condition, Dimension
from dvt_hpo.studyfile.fields import Reader
from dvt_hpo.studyfile.trainer import config_value, field_type

__all__ = ["read_search_space"]

DIMENSION_KINDS = ("float", "int", "categorical", "bool")
_KIND_KEYS: dict[str, tuple[str, ...]] = {
    "float": ("low", "high", "step", "log"),
    "int": ("low", "high", "step", "log"),
    "categorical": ("choices",),
    "bool": (),
}
# Optuna's categorical choices: anything else is stored by repr and compares badly.
_CHOICE_TYPES = (type(None), bool, int, float, str)


def read_search_space(
    r: Reader,
    root: Mapping[str, Any],
    schema: type | None,
    config: dict[str, Any],
    command: Sequence[str] | None = None,
) -> tuple[Dimension, ...]:
    """``command``: a ``trainer.command``'s argv, whose placeholders may name dimensions (a
    dimension there needs no ``path``, and its path may add a key)."""
    key: Key = ("search_space",)
    example = "- {name: lr, kind: float, path: optim.optim_args.lr, low: 1.0e-4, high: 0.1}"
    if "search_space" not in root:
        raise r.err(
            key,
            f"missing required section 'search_space': a list of dimensions such as {example}",
        )
    items = root["search_space"]
    if not isinstance(items, list):
        raise r.err(key, f"must be a list of dimensions such as {example}, got {describe(items)}")
    if not items:
        raise r.err(key, "must list at least one dimension, got an empty list")
    all_names = [
        (item.get("name") or item.get("path")) if isinstance(item, dict) else None for item in items
    ]
    named = {n for arg in command or () for n in placeholders(arg)}
    dims: list[Dimension] = []
    for i, item in enumerate(items):
        dim = read_dimension(r, item, (*key, i), dims, all_names, command=command is not None)
        for j, other in enumerate(dims):
            a, b = _path_parts(other.path), _path_parts(dim.path)
            n = min(len(a), len(b))
            if a[:n] == b[:n] and not _conditions_exclusive(dim.when, other.when):
                relation = "is the same as" if len(a) == len(b) else "overlaps"
                raise r.err(
                    (*key, i, "path"),
                    f"{dim.path!r} {relation} search_space[{j}].path {other.path!r} "
                    f"(dimension {other.name!r}): one write would undo the other; two "
                    "dimensions may share a path only when their `when` conditions exclude "
                    "each other",
                )
        dims.append(dim)
    if command is not None:
        # A placeholder typo ({lrr} for dimension lr) first: it is the mistake, and the
        # dimension it leaves unnamed would otherwise be refused as adding a key (new_key),
        # the wrong fix.
        from dvt_hpo.studyfile.command import check_placeholders

        check_placeholders(r, command, dims, config)
    for i, dim in enumerate(dims):
        check_target(r, dim, (*key, i), schema, config, named)
    return tuple(dims)


def read_dimension(
    r: Reader,
    item: Any,
    key: Key,
    earlier: Sequence[Dimension],
    all_names: Sequence[Any],
    *,
    command: bool = False,
) -> Dimension:
    if not isinstance(item, dict):
        raise r.err(
            key,
            f"a dimension must be a mapping {{name, kind, path, ...}}, got {describe(item)}",
        )
    r.section(Dimension, item, key, "a dimension", keys_only=True)
    if "path" in item:
        path = r.dotted(item["path"], (*key, "path"))
    elif command and "name" in item:
        # A command trainer takes its values as {name} placeholders: the name is the path.
        path = r.dotted(item["name"], (*key, "name"))
    elif command:
        raise r.err(key, "a dimension needs 'name' (its {name} in trainer.command) or 'path'")
    else:
        raise r.err(key, "a dimension needs 'path': where its value goes in the trainer config")
    name = r.value(item["name"], (*key, "name"), str) if "name" in item else path
    for j, other in enumerate(earlier):
        if other.name == name:
            raise r.err(
                (*key, "name" if "name" in item else "path"),
                f"duplicate dimension name {name!r} (also search_space[{j}]); names must be unique",
            )
    if "kind" not in item:
        raise r.err(key, f"dimension {name!r} needs 'kind': one of {', '.join(DIMENSION_KINDS)}")
    plain = r.section(Dimension, item, key, "a dimension")  # kind and log
    kind = plain["kind"]
    allowed = _KIND_KEYS[kind]
    for k in item:
        if k in _KIND_KEYS["float"] + _KIND_KEYS["categorical"] and k not in allowed:
            takes = f"takes {', '.join(allowed)}" if allowed else "takes no range or choices"
            raise r.err((*key, k), f"{k!r} does not apply to kind {kind!r} ({kind} {takes})")
    when = read_when(r, item, key, name, earlier, all_names)
    if kind == "float":
        dim = float_dimension(r, item, key, name, path, when)
    elif kind == "int":
        dim = int_dimension(r, item, key, name, path, when)
    elif kind == "categorical":
        dim = categorical_dimension(r, item, key, name, path, when)
    else:
        dim = Dimension(name=name, kind="bool", path=path, when=when)
    if plain.get("new_key"):
        dim = dataclasses.replace(dim, new_key=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            space.distribution(dim)
    except ValueError as exc:  # Optuna's own rule, should ours have missed one
        raise r.err(key, f"Optuna rejects dimension {name!r}: {exc}") from None
    return dim


def bounds(r: Reader, item: Mapping[str, Any], key: Key, kind: str) -> tuple[Any, Any]:
    out = []
    for bound in ("low", "high"):
        if bound not in item:
            raise r.err(key, f"kind {kind!r} needs 'low' and 'high'; {bound!r} is missing")
        value = item[bound]
        if kind == "int":
            if isinstance(value, float) and value.is_integer():
                raise r.err(
                    (*key, bound),
                    f"int bounds must be integers, got {value!r} (float); write {int(value)}",
                )
            if isinstance(value, bool) or not isinstance(value, int):
                raise r.err((*key, bound), f"int bounds must be integers, got {describe(value)}")
        elif (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise r.err(
                (*key, bound), f"float bounds must be finite numbers, got {describe(value)}"
            )
        out.append(value)
    low, high = out
    if low > high:
        raise r.err((*key, "low"), f"low must be <= high, got low={low!r}, high={high!r}")
    return low, high


def float_dimension(
    r: Reader, item: Mapping[str, Any], key: Key, name: str, path: str, when: Condition | None
) -> Dimension:
    low, high = bounds(r, item, key, "float")
    log = item.get("log", False)
    step = r.value(item.get("step"), (*key, "step"), float | None, gt=0)
    if step is not None and log:
        raise r.err(
            (*key, "step"),
            f"step and log cannot be used together (Optuna's rule), got step={step!r} and "
            "log=true; drop step for log-uniform sampling or log for a regular grid",
        )
    if log and low <= 0:
        raise r.err((*key, "low"), f"log sampling needs low > 0, got low={low!r}")
    return Dimension(
        name=name,
        kind="float",
        path=path,
        low=float(low),
        high=float(high),
        step=step,
        log=log,
        when=when,
    )


def int_dimension(
    r: Reader, item: Mapping[str, Any], key: Key, name: str, path: str, when: Condition | None
) -> Dimension:
    low, high = bounds(r, item, key, "int")
    log = item.get("log", False)
    step = r.value(item.get("step", 1), (*key, "step"), int, ge=1)
    if log and step != 1:
        raise r.err(
            (*key, "step"),
            f"step and log cannot be used together (Optuna's rule: log needs step 1), got "
            f"step={step} and log=true",
        )
    if log and low < 1:
        raise r.err((*key, "low"), f"log sampling needs low >= 1, got low={low}")
    return Dimension(
        name=name, kind="int", path=path, low=low, high=high, step=step, log=log, when=when
    )


def categorical_dimension(
    r: Reader, item: Mapping[str, Any], key: Key, name: str, path: str, when: Condition | None
) -> Dimension:
    ckey = (*key, "choices")
    if "choices" not in item:
        raise r.err(key, f"kind 'categorical' needs 'choices' (dimension {name!r})")
    choices = item["choices"]
    if not isinstance(choices, list) or not choices:
        raise r.err(ckey, f"must be a non-empty list, got {describe(choices)}")
    for j, choice in enumerate(choices):
        if not isinstance(choice, _CHOICE_TYPES):
            raise r.err(
                (*ckey, j),
                "each choice must be null, a boolean, an integer, a float or a string "
                f"(Optuna's rule), got {describe(choice)}",
            )
        for i, before in enumerate(choices[:j]):
            if space.same_value(before, choice):
                raise r.err((*ckey, j), f"duplicate choice {choice!r} (also choices[{i}])")
    return Dimension(name=name, kind="categorical", path=path, choices=tuple(choices), when=when)


def read_when(
    r: Reader,
    item: Mapping[str, Any],
    key: Key,
    name: str,
    earlier: Sequence[Dimension],
    all_names: Sequence[Any],
) -> Condition | None:
    if item.get("when") is None:
        return None
    wkey = (*key, "when")
    value = item["when"]
    if not isinstance(value, dict) or not value:
        raise r.err(
            wkey,
            f"must be a mapping {{earlier_dimension: value or [values]}}, got {describe(value)}",
        )
    by_name = {d.name: d for d in earlier}
    equals: dict[str, tuple[Any, ...]] = {}
    for ref, allowed in value.items():
        rkey = (*wkey, ref)
        if ref == name:
            raise r.err(rkey, f"dimension {name!r} cannot depend on itself")
        if ref not in by_name:
            if ref in all_names:
                raise r.err(
                    rkey,
                    f"refers to {ref!r}, which is defined later; a condition can only refer "
                    "to dimensions listed before it (move it up)",
                )
            names = list(by_name)
            listing = ", ".join(names) if names else "none"
            raise r.err(
                rkey,
                f"refers to unknown dimension {ref!r}{did_you_mean(str(ref), names)} (earlier "
                f"dimensions: {listing})",
            )
        target = by_name[ref]
        values = allowed if isinstance(allowed, list) else [allowed]
        if not values:
            raise r.err(rkey, "needs at least one value, got an empty list")
        if target.kind == "float" and target.step is None:
            raise r.err(
                rkey,
                f"{ref!r} is a continuous float dimension, so a condition on one of its "
                "values would almost never hold; give it a step or make it categorical",
            )
        for j, v in enumerate(values):
            if not _can_take(target, v):
                vkey = (*rkey, j) if isinstance(allowed, list) else rkey
                raise r.err(vkey, f"{ref!r} never takes {describe(v)}: it takes {_takes(target)}")
        equals[ref] = tuple(values)
    return Condition(equals=equals)


def check_target(
    r: Reader,
    dim: Dimension,
    key: Key,
    schema: type | None,
    config: dict[str, Any],
    named: Set[str] = frozenset(),
) -> None:
    """The dimension's path exists and every value it can produce is accepted there; a path
    that adds a key to the config is refused unless the dimension says ``new_key: true`` or a
    command placeholder names it (a typo would tune a value nobody reads)."""
    pkey = (*key, "path") if (*key, "path") in r.doc.locs else (*key, "name")
    if schema is None and dim.name not in named and dim.path not in named and not dim.new_key:
        check_existing_key(r, dim, pkey, config)
    if schema is None:
        current = config_value(r, config, dim.path, pkey, "path")
        if isinstance(current, (dict, list)):
            raise r.err(
                pkey,
                f"{dim.path!r} is a section ({type(current).__name__}) of trainer.config, not "
                "a value a dimension can set",
            )
        return
    tp = field_type(r, schema, dim.path, pkey, "path")
    produced = _produced_values(dim, key)
    for vkey, value in produced:
        if not value_fits_type(value, tp):
            hint = ""
            if dim.kind == "float" and value_fits_type(1, tp):
                hint = "; use kind: int"
            raise r.err(
                vkey,
                f"dimension {dim.name!r} ({dim.kind}) produces {value!r}, but "
                f"{dim.path} takes {type_name(tp)}{hint}",
            )
    # The config's own rules (epochs >= 1, 0 < val_fraction < 1, ...) at the extremes.
    for vkey, value in produced:
        data = copy.deepcopy(config)
        set_path(data, dim.path, value, create=True)
        try:
            from_mapping(schema, data)
        except SpecError as exc:
            raise r.err(
                vkey,
                f"dimension {dim.name!r} can produce {value!r}, which the trainer config "
                f"rejects: {exc.field + ': ' if exc.field else ''}{exc.message}",
            ) from None


def check_existing_key(r: Reader, dim: Dimension, pkey: Key, config: Mapping[str, Any]) -> None:
    """Refuse a path whose last key is not in the config's mapping there (its sections exist),
    for a config without a schema. With a schema its dataclass fields are checked by it, and
    its free mappings are keyword arguments (``optim.optim_args``, ``model.kwargs``) that a
    search adds to; a built-in model's are checked against the builder's signature
    (:mod:`dvt_hpo.run.builders`)."""
    parts = parse_path(dim.path)
    last = parts[-1]
    if not isinstance(last, str):
        return
    if len(parts) > 1:
        try:
            parent = get_path(config, format_path(parts[:-1]))
        except (KeyError, IndexError, TypeError, AttributeError):
            return  # a missing section is the path check's to say
    else:
        parent = config
    if not isinstance(parent, Mapping) or last in parent:
        return
    where = format_path(parts[:-1]) if len(parts) > 1 else "trainer.config"
    keys = sorted(str(k) for k in parent)
    listing = f" (it has: {', '.join(keys)})" if 0 < len(keys) <= 12 else ""
    hint = did_you_mean(str(last), keys)
    raise r.err(
        pkey,
        f"{dim.path!r} adds key {last!r}, which {where} does not have{hint}{listing}: the "
        "trainer would never read the value this dimension tunes; fix the path, or set "
        "new_key: true on the dimension if the trainer reads a key the config leaves out",
    )


def _path_parts(path: str) -> list[str | int]:
    """Parsed path with ``a.0`` and ``a[0]`` made equal, for comparing paths."""
    return [int(p) if isinstance(p, str) and p.isdigit() else p for p in parse_path(path)]


def _produced_values(dim: Dimension, key: Key) -> list[tuple[Key, Any]]:
    """The extreme values a dimension can write (and where they are declared)."""
    if dim.kind == "float":
        return [((*key, "low"), float(dim.low)), ((*key, "high"), float(dim.high))]  # type: ignore[arg-type]
    if dim.kind == "int":
        return [((*key, "low"), dim.low), ((*key, "high"), dim.high)]
    if dim.kind == "categorical":
        return [((*key, "choices", j), c) for j, c in enumerate(dim.choices or ())]
    return [((*key, "kind"), False), ((*key, "kind"), True)]


def _can_take(dim: Dimension, value: Any) -> bool:
    if dim.kind == "bool":
        return isinstance(value, bool)
    if dim.kind == "categorical":
        return any(space.same_value(value, c) for c in dim.choices or ())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    low, high = dim.low, dim.high
    assert low is not None and high is not None
    if not low <= value <= high:
        return False
    if dim.kind == "int":
        return isinstance(value, int) and (value - low) % int(dim.step or 1) == 0
    step = float(dim.step)  # type: ignore[arg-type]
    return abs(round((value - low) / step) * step + low - value) < 1e-8


def _takes(dim: Dimension) -> str:
    if dim.kind == "bool":
        return "true or false"
    if dim.kind == "categorical":
        return f"one of {list(dim.choices or ())}"
    if dim.kind == "int":
        return f"integers from {dim.low} to {dim.high} in steps of {dim.step or 1}"
    return f"numbers from {dim.low} to {dim.high} in steps of {dim.step}"


def _conditions_exclusive(a: Condition | None, b: Condition | None) -> bool:
    """Whether two conditions can never hold together (a shared dimension, disjoint values)."""
    if a is None or b is None:
        return False
    for name, values in a.equals.items():
        other = b.equals.get(name)
        if other is not None and not any(space.same_value(x, y) for x in values for y in other):
            return True
    return False
