"""Whether a study file still fits the study stored under its name, and what to store.

A study's trials are only comparable when they optimize the same quantity the same way: a
changed direction, objective metric or reduction would rank values of different quantities as
one, so they refuse the run (exit 2), as a changed search space does unless
``--allow-space-change``. Changed sampler or pruner settings only inform: they affect how later
trials are chosen or stopped, not what earlier values mean.

:func:`compare` is pure: the caller gives the stored study (the study loop:
:meth:`StoredStudy.from_study`) and stores :func:`settings_attrs` once the run is accepted.
:func:`check_stored_study` reads it first, without writing (``validate``, and ``run`` before
its storage is opened, so a refused run writes nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dvt_hpo.exceptions import SpecError

if TYPE_CHECKING:
    from dvt_hpo.spec.model import StudySpec
    from dvt_hpo.stored_study import StoredStudy

__all__ = [
    "ATTR_PREFIX",
    "Comparison",
    "Difference",
    "compare",
    "check_stored_study",
    "refusal_error",
    "settings_attrs",
]

# The study user attrs the study loop writes (keys as the first release wrote them).
ATTR_PREFIX = "dvt_hpo:"


@dataclass(frozen=True)
class Difference:
    field: str  # the study file's field, e.g. "objective.metric"
    text: str  # e.g. "metric 'score' -> 'accuracy'"


@dataclass(frozen=True)
class Comparison:
    refusals: tuple[Difference, ...]  # each refuses the run
    space_changes: tuple[str, ...]  # accepted with --allow-space-change: print them
    notes: tuple[str, ...]  # informative only

    @property
    def ok(self) -> bool:
        return not self.refusals


def settings_attrs(spec: StudySpec) -> dict[str, Any]:
    """The study user attrs describing ``spec`` (JSON-safe), compared by :func:`compare`."""
    from dvt_hpo.space import space_signature

    return {
        ATTR_PREFIX + "space": space_signature(spec.search_space),
        ATTR_PREFIX + "sampler": {"kind": spec.study.sampler.kind, **spec.study.sampler.kwargs},
        ATTR_PREFIX + "pruner": {"kind": spec.study.pruner.kind, **spec.study.pruner.kwargs},
        ATTR_PREFIX + "objective": {
            "metric": spec.objective.metric,
            "direction": spec.objective.direction,
            "reduce": spec.objective.reduce,
        },
    }


def compare(
    spec: StudySpec, stored: StoredStudy, *, allow_space_change: bool = False
) -> Comparison:
    """What differs between ``spec`` and the stored study. Attrs the stored study lacks (a
    study from before they were stored) are not compared."""
    from dvt_hpo.space import diff_spaces

    wanted = settings_attrs(spec)
    attrs: Mapping[str, Any] = stored.user_attrs
    refusals: list[Difference] = []
    if stored.direction != spec.objective.direction:
        refusals.append(
            Difference(
                "objective.direction",
                f"direction {stored.direction!r} -> {spec.objective.direction!r}",
            )
        )
    old_objective = attrs.get(ATTR_PREFIX + "objective")
    if isinstance(old_objective, Mapping):
        for name in ("metric", "reduce"):
            before, after = old_objective.get(name), getattr(spec.objective, name)
            if before is not None and before != after:
                refusals.append(Difference(f"objective.{name}", f"{name} {before!r} -> {after!r}"))
    space_changes: list[str] = []
    old_space = attrs.get(ATTR_PREFIX + "space")
    if isinstance(old_space, Mapping):
        changes = diff_spaces(old_space, wanted[ATTR_PREFIX + "space"])
        if allow_space_change:
            space_changes = changes
        else:
            refusals.extend(Difference("search_space", change) for change in changes)
    notes = []
    for key in ("sampler", "pruner"):
        before = attrs.get(ATTR_PREFIX + key)
        after = wanted[ATTR_PREFIX + key]
        if before is not None and before != after:
            notes.append(f"study.{key} settings changed from {before} to {after}")
    return Comparison(tuple(refusals), tuple(space_changes), tuple(notes))


def refusal_error(spec: StudySpec, comparison: Comparison, where: str) -> SpecError | None:
    """One message listing every refused difference, placed at the first one's line (``None``
    when the run may go on). ``where`` names the storage (redacted)."""
    if comparison.ok:
        return None
    first = comparison.refusals[0]
    file, line = spec.locate(first.field)
    listed = "; ".join(f"{d.field}: {d.text}" for d in comparison.refusals)
    fixes = []
    if any(d.field != "search_space" for d in comparison.refusals):
        fixes.append(
            "the objective of a study cannot change (values of different quantities would be "
            "ranked as one): restore it or use another study.name"
        )
    if any(d.field == "search_space" for d in comparison.refusals):
        fixes.append(
            "rerun with --allow-space-change to accept the search-space changes, or use "
            "another study.name"
        )
    return SpecError(
        f"differs from the study {spec.study.name!r} stored in {where}: {listed}. "
        + "; ".join(fixes),
        file=file,
        line=line,
        field=first.field,
    )


def check_stored_study(
    spec: StudySpec, *, allow_space_change: bool = False
) -> tuple[StoredStudy | None, Comparison | None]:
    """Read the study stored under ``spec``'s name without writing anything and compare:
    ``(None, None)`` when there is none yet; raises the :func:`refusal_error` (exit 2), or
    :class:`~dvt_hpo.exceptions.DvtHpoError` (one line) when the storage cannot be read."""
    from dvt_hpo.storage import redact_url
    from dvt_hpo.stored_study import read_stored_study

    stored = read_stored_study(spec.study.storage, spec.study.name, source=spec.path)
    if stored is None:
        return None, None
    comparison = compare(spec, stored, allow_space_change=allow_space_change)
    error = refusal_error(spec, comparison, redact_url(spec.study.storage))
    if error is not None:
        raise error
    return stored, comparison
