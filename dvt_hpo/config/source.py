"""The YAML every file of the project is read with, with the line of every node, and ``--set``.

One loader (YAML 1.2 numbers: ``1e-4`` is a float) for study files, trainer config files and
``--set PATH=VALUE`` values, so a number means the same wherever it is written. :class:`Doc`
remembers where each key and item came from (file and line, or ``<--set>``), so a later check
can name the line of the value it rejects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dvt_hpo.config.hints import describe
from dvt_hpo.config.paths import format_path, parse_path
from dvt_hpo.exceptions import SpecError

__all__ = [
    "OVERRIDE_SOURCE",
    "Doc",
    "Key",
    "Override",
    "YamlLoader",
    "apply_override",
    "parse_override",
    "read_yaml",
    "yaml_error",
]

OVERRIDE_SOURCE = "<--set>"
# Where a study file's overrides are shown as examples; `dvt-hpo train` passes its own.
STUDY_EXAMPLES = "study.n_trials=20 or search_space[0].high=0.5"

Key = tuple[Any, ...]
Loc = tuple[str, "int | None"]


class YamlLoader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-4`` as a float, as YAML 1.2 and users expect."""


YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


class Doc:
    """Where every node of the raw tree comes from: ``{key tuple: (file, line)}``."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.locs: dict[Key, Loc] = {}

    def loc(self, key: Key) -> Loc:
        # The deepest known ancestor: a missing key is reported at its section's line.
        for n in range(len(key), -1, -1):
            found = self.locs.get(tuple(key[:n]))
            if found is not None:
                return found
        return (self.file, None)

    def error(self, key: Key, message: str) -> SpecError:
        file, line = self.loc(key)
        return SpecError(message, file=file, line=line, field=format_path(key) or None)

    def place(self, exc: SpecError, prefix: Key = ()) -> SpecError:
        """``exc`` from a check that knows only a dotted field (relative to ``prefix``), placed
        at that field's line in these files."""
        parts: list[Any] = []
        if exc.field:
            try:
                parts = parse_path(exc.field)
            except KeyError:
                parts = []
        return self.error((*prefix, *parts), exc.message)

    def forget(self, key: Key) -> None:
        for known in [k for k in self.locs if k[: len(key)] == key]:
            del self.locs[known]


def yaml_error(exc: yaml.YAMLError, file: str) -> SpecError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else None
    parts = [getattr(exc, "context", None), getattr(exc, "problem", None)]
    text = ", ".join(p for p in parts if p) or str(exc)
    return SpecError(f"invalid YAML: {text}", file=file, line=line)


def _construct(
    loader: YamlLoader, node: yaml.Node, key: Key, doc: Doc, file: str, active: set[int]
) -> Any:
    line = node.start_mark.line + 1
    doc.locs.setdefault(key, (file, line))
    if id(node) in active:
        raise SpecError("recursive YAML alias", file=file, line=line)
    if isinstance(node, yaml.MappingNode):
        active.add(id(node))
        loader.flatten_mapping(node)  # `<<: *anchor` merge keys
        out: dict[Any, Any] = {}
        own_lines: dict[Any, int] = {}
        for key_node, value_node in node.value:
            name = loader.construct_object(key_node, deep=True)
            key_line = key_node.start_mark.line + 1
            try:
                hash(name)
            except TypeError:
                raise SpecError(
                    f"mapping keys must be plain scalars, got {describe(name)}",
                    file=file,
                    line=key_line,
                ) from None
            # Keys merged from an anchor live outside this node and may be overridden; two
            # keys written in this mapping are a mistake that PyYAML would silently resolve.
            own = node.start_mark.index <= key_node.start_mark.index <= node.end_mark.index
            if own and name in own_lines:
                raise SpecError(
                    f"duplicate key {name!r} (first given at line {own_lines[name]})",
                    file=file,
                    line=key_line,
                    field=format_path((*key, name)),
                )
            if own:
                own_lines[name] = key_line
            child = (*key, name)
            doc.forget(child)
            doc.locs[child] = (file, key_line)
            out[name] = _construct(loader, value_node, child, doc, file, active)
        active.discard(id(node))
        return out
    if isinstance(node, yaml.SequenceNode):
        active.add(id(node))
        items = []
        for i, item in enumerate(node.value):
            doc.locs[(*key, i)] = (file, item.start_mark.line + 1)
            items.append(_construct(loader, item, (*key, i), doc, file, active))
        active.discard(id(node))
        return items
    return loader.construct_object(node, deep=True)


def read_yaml(path: Path, shown: str, doc: Doc, prefix: Key, what: str) -> Any:
    """Parse the YAML file ``path`` and record the line of every node under ``prefix``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read {what}: {exc.strerror or exc}", file=shown) from None
    loader = YamlLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        return _construct(loader, node, prefix, doc, shown, set())
    except yaml.YAMLError as exc:
        raise yaml_error(exc, shown) from None
    finally:
        loader.dispose()


# ---------------------------------------------------------------------------------------------
# --set overrides


@dataclass(frozen=True)
class Override:
    text: str
    parts: tuple[str | int, ...]
    value: Any


def parse_override(text: str, examples: str = STUDY_EXAMPLES) -> Override:
    """``PATH=VALUE`` -> an :class:`Override` (VALUE read as YAML, with the same loader)."""
    if not isinstance(text, str) or "=" not in text:
        raise SpecError(
            f"expected PATH=VALUE such as {examples}, got {text!r}",
            file=OVERRIDE_SOURCE,
        )
    path, _, raw = text.partition("=")
    path = path.strip()
    try:
        parts = parse_path(path)
    except KeyError as exc:
        raise SpecError(
            f"malformed path in {text!r}: {exc}", file=OVERRIDE_SOURCE, field=path or None
        ) from None
    try:
        value = yaml.load(raw, Loader=YamlLoader) if raw.strip() else None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(
            f"the value of {text!r} is not valid YAML: {problem}", file=OVERRIDE_SOURCE, field=path
        ) from None
    return Override(text, tuple(parts), value)


def apply_override(doc: Doc, root: dict[str, Any], override: Override) -> None:
    """Write one override into the raw tree; its subtree is then reported as ``<--set>``."""
    node: Any = root
    walked: list[str | int] = []
    for i, part in enumerate(override.parts):
        here = format_path(walked) or "the top level"
        if isinstance(node, list):
            if isinstance(part, str) and part.isdigit():
                part = int(part)
            if not isinstance(part, int):
                raise SpecError(
                    f"{here} is a list, so the next segment must be an index (0..{len(node) - 1}), "
                    f"got {part!r} in {override.text!r}",
                    file=OVERRIDE_SOURCE,
                    field=format_path([*walked, part]),
                )
            if not 0 <= part < len(node):
                raise SpecError(
                    f"index {part} is out of range: {here} has {len(node)} item{'s' if len(node) != 1 else ''} "
                    f"(0..{len(node) - 1}), in {override.text!r}",
                    file=OVERRIDE_SOURCE,
                    field=format_path([*walked, part]),
                )
        elif isinstance(node, dict):
            if isinstance(part, int):
                raise SpecError(
                    f"{here} is a mapping, not a list, so [{part}] does not apply, in "
                    f"{override.text!r}",
                    file=OVERRIDE_SOURCE,
                    field=format_path([*walked, part]),
                )
        else:
            raise SpecError(
                f"cannot set {format_path(override.parts)!r}: {here} is "
                f"{describe(node)}, not a mapping or a list",
                file=OVERRIDE_SOURCE,
                field=format_path(walked),
            )
        walked.append(part)
        if i == len(override.parts) - 1:
            node[part] = override.value
        else:
            child = node[part] if isinstance(node, list) else node.get(part)
            if child is None:
                child = {}
                node[part] = child
                doc.forget(tuple(walked))
                doc.locs[tuple(walked)] = (OVERRIDE_SOURCE, None)
            node = child
    key = tuple(walked)
    doc.forget(key)
    doc.locs[key] = (OVERRIDE_SOURCE, None)
