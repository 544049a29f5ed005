"""The study.yaml reference, generated from the dataclasses the loader checks a study file with.

Every field of :mod:`dvt_hpo.spec.model` says what it is in its own line
(``rule(..., doc="...")`` or ``domain(..., doc="...", accepts="...")``, read back with
:func:`dvt_hpo.config.schema.field_doc`); its type, default and range come from the same field.
The docs site renders :func:`markdown` at build time (``docs/hooks.py``), so the reference
cannot drift from the loader; :func:`undocumented` lists what a new field still lacks, and a test
fails while it lists anything.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dvt_hpo.config.schema import Rule, allowed_text, field_doc
from dvt_hpo.sampling import kinds
from dvt_hpo.spec.model import StudySpec
from dvt_hpo.studyfile.load import SECTIONS

__all__ = ["Row", "markdown", "rows", "sections", "undocumented"]

# Fields whose kinds and defaults are the registry's (dvt_hpo.sampling.kinds sits above
# dvt_hpo.spec, so their declarations cannot name them): what the reference shows comes from it.
FROM_THE_REGISTRY: dict[str, typing.Literal["sampler", "pruner"]] = {
    "study.sampler": "sampler",
    "study.pruner": "pruner",
}


@dataclass(frozen=True)
class Row:
    """One field of the reference: ``path`` as a study file writes it
    (``objective.metrics[].name``)."""

    path: str
    allowed: str
    default: str
    doc: str | None
    problem: str | None  # what the field's declaration lacks, for undocumented()


def _nested(tp: Any) -> type | None:
    """The dataclass a field's value is written as (a section, or a list of them)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = members[0] if len(members) == 1 else tp
    if typing.get_origin(tp) is tuple:
        tp = typing.get_args(tp)[0]
    return tp if isinstance(tp, type) and dataclasses.is_dataclass(tp) else None


def _yaml(value: Any) -> str:
    if isinstance(value, Path):
        return f"`{value}`"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{json.dumps(value)}`" if not isinstance(value, str) else f"`{value}`"


def _default(f: dataclasses.Field, shown: str | None) -> str:
    if shown is not None:
        return shown
    if f.default is not dataclasses.MISSING:
        return _yaml(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return _yaml(f.default_factory())
    return "required"


def sections() -> list[tuple[str, type, bool]]:
    """``(name, dataclass, is_list)`` of each section of a study file."""
    hints = typing.get_type_hints(StudySpec)
    out = []
    for name in SECTIONS:  # the loader's order
        tp = hints[name]
        cls = _nested(tp)
        assert cls is not None, name
        out.append((name, cls, typing.get_origin(tp) is tuple))
    return out


def rows(cls: type, prefix: str) -> Iterator[Row]:
    """The reference's rows of ``cls``'s fields, nested sections after their field."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        tp = hints[f.name]
        rule: Rule | None = f.metadata.get("rule")
        written = field_doc(f)
        path = f"{prefix}.{f.name}"
        nested = _nested(tp) if written is None or written.accepts is None else None
        problem = None
        if written is None:
            problem = f"{path}: no doc= sentence"
        if written is not None and written.accepts is not None:
            allowed = written.accepts
        elif nested is not None:
            many = typing.get_origin(tp) is tuple
            allowed = "a list of mappings (below)" if many else "a mapping (below)"
            if type(None) in typing.get_args(tp):
                allowed += " or null"
        elif rule is not None and not rule.domain:
            allowed = allowed_text(tp, rule)
        else:
            allowed = ""
            problem = problem or f"{path}: a domain field needs accepts= (what the file writes)"
        default = _default(f, written.default if written else None)
        if path in FROM_THE_REGISTRY:
            allowed = kinds.accepts_text(FROM_THE_REGISTRY[path])
            default = kinds.default_text(FROM_THE_REGISTRY[path])
        yield Row(
            path=path,
            allowed=allowed,
            default=default,
            doc=written.doc if written else None,
            problem=problem,
        )
        if nested is not None:
            many = typing.get_origin(tp) is tuple
            yield from rows(nested, f"{path}[]" if many else path)


def undocumented() -> list[str]:
    """What the reference cannot say yet: a field without its sentence (or a domain field
    without what it accepts), a section without its docstring."""
    problems = []
    for name, cls, _ in sections():
        if not (cls.__doc__ or "").strip() or cls.__doc__.startswith(cls.__name__ + "("):
            problems.append(f"section {name}: {cls.__name__} has no docstring")
        problems += [r.problem for r in rows(cls, name) if r.problem]
        problems += [
            f"{name}: {nested.__name__} has no docstring"
            for nested in _nested_classes(cls)
            if not (nested.__doc__ or "").strip()
            or nested.__doc__.startswith(nested.__name__ + "(")
        ]
    return problems


def _nested_classes(cls: type) -> Iterator[type]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        written = field_doc(f)
        nested = _nested(hints[f.name]) if written is None or written.accepts is None else None
        if nested is not None:
            yield nested
            yield from _nested_classes(nested)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _first_paragraph(cls: type) -> str:
    text = (cls.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(text.split()).replace("``", "`")


def markdown() -> str:
    """The study.yaml reference page (Markdown), one table per section."""
    lines = [
        "# study.yaml reference",
        "",
        "Generated from the dataclasses the loader checks a study file against "
        "(`dvt_hpo/spec/model.py`): what this page says is what `dvt-hpo validate` "
        "accepts. A study file has eight sections; only `study.name`, `trainer` and "
        "`search_space` are required. Unknown keys are rejected with a did-you-mean, and "
        "relative paths (SQLite and journal files, `trainer.config_file`, `trials.runs_dir`) "
        "resolve against the study file's folder. The rules behind some defaults (the "
        "objective's direction, the samplers and pruners, seeding) are in "
        "[study.yaml rules](study-rules.md).",
        "",
    ]
    for name, cls, is_list in sections():
        lines += [f"## {name}", "", _first_paragraph(cls), ""]
        if is_list:
            lines += [f"`{name}` is a list; each item is a mapping of these fields.", ""]
        lines += ["| field | allowed | default | what it does |", "| --- | --- | --- | --- |"]
        prefix = f"{name}[]" if is_list else name
        for row in rows(cls, prefix):
            lines.append(
                f"| `{row.path}` | {_cell(row.allowed)} | {_cell(row.default)} | "
                f"{_cell(row.doc or '')} |"
            )
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - `python -m dvt_hpo.studyfile.reference`
    print(markdown())
