"""Whether a study file still fits the study stored under its name, and what to store.

A study's trials are only comparable when they optimize the same quantity the same way: a
changed direction, objective metric or reduction, a changed list of objectives (names,
directions, order, count) or of constraints would rank values of different quantities as
one, so they refuse the run (exit 2), as a changed search space does unless
``--allow-space-change``. Changed sampler or pruner settings only inform: they affect how later
trials are chosen or stopped, not what earlier values mean.

:func:`compare` is pure: the caller gives the stored study (the study loop:
:meth:`~dvt_hpo.store.opening.StoredStudy.from_study`) and stores :func:`settings_attrs` once the run is accepted.
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
    from dvt_hpo.store.opening import StoredStudy

__all__ = [
    "ATTR_PREFIX",
    "CONSTRAINTS_ATTR",
    "OBJECTIVES_ATTR",
    "Comparison",
    "Difference",
    "compare",
    "check_stored_study",
    "refusal_error",
    "settings_attrs",
    "system_attrs",
]

# The study user attrs the study loop writes (keys as the first release wrote them).
ATTR_PREFIX = "dvt_hpo:"
# Study system attrs: the objectives and constraints a study was created with.
OBJECTIVES_ATTR = ATTR_PREFIX + "objectives"
CONSTRAINTS_ATTR = ATTR_PREFIX + "constraints"


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
    from dvt_hpo.sampling.space import space_signature

    return {
        ATTR_PREFIX + "space": space_signature(spec.search_space),
        ATTR_PREFIX + "sampler": {"kind": spec.study.sampler.kind, **spec.study.sampler.kwargs},
        ATTR_PREFIX + "pruner": {"kind": spec.study.pruner.kind, **spec.study.pruner.kwargs},
        ATTR_PREFIX + "objective": {
            "metric": spec.objective.metric,
            "direction": spec.objective.direction,
            "reduce": spec.objective.reduce,
            # Only when used, so a plain study's attr stays as the first release wrote it.
            **({"metrics": _objectives(spec)} if spec.objective.is_multi else {}),
            **({"constraints": _constraints(spec)} if spec.objective.constraints else {}),
        },
    }


def _objectives(spec: StudySpec) -> list[dict[str, str]]:
    return [
        {"name": n, "direction": d}
        for n, d in zip(spec.objective.names, spec.objective.directions, strict=True)
    ]


def _constraints(spec: StudySpec) -> list[dict[str, Any]]:
    return [{"metric": c.metric, "min": c.min, "max": c.max} for c in spec.objective.constraints]


def system_attrs(spec: StudySpec) -> dict[str, Any]:
    """The study system attrs that pin its objectives and constraints (JSON-safe): written
    when the study is created (or first run by a release that knows them), then compared."""
    return {OBJECTIVES_ATTR: _objectives(spec), CONSTRAINTS_ATTR: _constraints(spec)}


def _constraint_text(items: Any) -> str:
    if not items:
        return "none"
    parts = []
    for c in items:
        low = f"{c.get('min'):g} <= " if c.get("min") is not None else ""
        high = f" <= {c.get('max'):g}" if c.get("max") is not None else ""
        parts.append(f"{low}{c.get('metric')}{high}")
    return ", ".join(parts)


def _objective_refusals(spec: StudySpec, stored: StoredStudy) -> list[Difference]:
    """Directions (Optuna's own record), names and constraints (our system attrs; a study
    from before they were stored: the objective user attr, and no constraints once it has
    trials)."""
    objective = spec.objective
    multi = objective.is_multi or len(stored.directions) > 1
    field = "objective.metrics" if multi else "objective.metric"
    refusals: list[Difference] = []
    directions = stored.directions or (stored.direction,)
    if len(directions) != len(objective.directions):
        refusals.append(
            Difference(
                field,
                f"{len(directions)} objective(s) -> {len(objective.directions)} (a study's number "
                "of objectives is fixed when it is created)",
            )
        )
    elif tuple(directions) != objective.directions:
        if multi:
            refusals.append(
                Difference(field, f"directions {list(directions)} -> {list(objective.directions)}")
            )
        else:
            refusals.append(
                Difference(
                    "objective.direction", f"direction {directions[0]!r} -> {objective.direction!r}"
                )
            )
    stored_objectives = stored.system_attrs.get(OBJECTIVES_ATTR)
    old_objective = stored.user_attrs.get(ATTR_PREFIX + "objective")
    names: list[Any] | None = None
    if isinstance(stored_objectives, list):
        names = [o.get("name") for o in stored_objectives if isinstance(o, Mapping)]
    elif isinstance(old_objective, Mapping) and old_objective.get("metric") is not None:
        names = [old_objective["metric"]]
    same_count = len(directions) == len(objective.directions)
    if names is not None and names != list(objective.names) and same_count:
        if multi:
            refusals.append(Difference(field, f"objectives {names} -> {list(objective.names)}"))
        else:
            refusals.append(
                Difference("objective.metric", f"metric {names[0]!r} -> {objective.metric!r}")
            )
    stored_constraints = stored.system_attrs.get(CONSTRAINTS_ATTR)
    if (
        stored_constraints is None
        and stored.n_trials
        and OBJECTIVES_ATTR not in stored.system_attrs
    ):
        stored_constraints = []  # trials from before constraints existed: none had any
    if isinstance(stored_constraints, list) and stored_constraints != _constraints(spec):
        refusals.append(
            Difference(
                "objective.constraints",
                f"constraints {_constraint_text(stored_constraints)} -> "
                f"{_constraint_text(_constraints(spec))}",
            )
        )
    return refusals


def compare(
    spec: StudySpec, stored: StoredStudy, *, allow_space_change: bool = False
) -> Comparison:
    """What differs between ``spec`` and the stored study. Attrs the stored study lacks (a
    study from before they were stored) are not compared."""
    from dvt_hpo.sampling.space import diff_spaces

    wanted = settings_attrs(spec)
    attrs: Mapping[str, Any] = stored.user_attrs
    refusals = _objective_refusals(spec, stored)
    old_objective = attrs.get(ATTR_PREFIX + "objective")
    if isinstance(old_objective, Mapping):
        before, after = old_objective.get("reduce"), spec.objective.reduce
        if before is not None and before != after:
            refusals.append(Difference("objective.reduce", f"reduce {before!r} -> {after!r}"))
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
    from dvt_hpo.store.opening import StudyAt
    from dvt_hpo.text.redact import redact_url

    stored = StudyAt.of(spec).read()
    if stored is None:
        return None, None
    comparison = compare(spec, stored, allow_space_change=allow_space_change)
    error = refusal_error(spec, comparison, redact_url(spec.study.storage))
    if error is not None:
        raise error
    return stored, comparison
