"""Dotted paths into nested configs: ``optim.optim_args.lr``, ``layers[0].units``.

One module for parsing, formatting, reading and writing them, used by the study loader, the
search space, the runner and the built-in trainer. Mappings, lists and dataclass instances are
walked alike; errors name the whole path, the failing segment and the closest valid key.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dvt_hpo.config.hints import did_you_mean

__all__ = [
    "PathIndexError",
    "PathKeyError",
    "format_path",
    "get_path",
    "parse_path",
    "set_path",
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
    hint = did_you_mean(key, names)
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
