"""The ``batch_size`` section as the typed dataclass the study file becomes and the payload carries.

Stdlib only, like :mod:`dvt_hpo.spec.model` (which names it in :class:`~dvt_hpo.spec.model.StudySpec`):
the trial process reads it from the payload without importing optuna or yaml. The fields'
sentences feed the generated study.yaml reference; the bounds that depend on each other are
checked by the section's reader (:mod:`dvt_hpo.studyfile.batch`).
"""

from __future__ import annotations

from dataclasses import dataclass

from dvt_hpo.config.schema import domain, rule

__all__ = ["BatchSizeSpec"]


@dataclass(frozen=True)
class BatchSizeSpec:
    """Section ``batch_size``: find, in each trial, the largest batch size that fits in memory,
    by real probe steps."""

    auto: bool = rule(False, doc="Search the batch size in every trial.")
    path: str = domain(
        "data.batch_size",
        doc="The trainer config's field the found size is written to.",
        accepts="a dotted path",
    )
    min: int = rule(1, ge=1, doc="The smallest size tried; a trial where it does not fit fails.")
    max: int = rule(
        1024, ge=1, doc="The largest size tried (never above the training samples per process)."
    )  # >= min, checked by the section's code
    start: int | None = rule(
        None, ge=1, doc="The first size probed.", shown_default="`min`"
    )  # default: min
    multiple_of: int = rule(1, ge=1, doc="Every size tried is a multiple of this.")
    tolerance: float = rule(
        0.02, gt=0, le=0.5, doc="Stop bisecting once within this share of the limit."
    )
    effective: int | None = rule(
        None,
        ge=1,
        doc="Keep the optimization batch at this size through gradient accumulation.",
    )
    accumulate_path: str = domain(
        "precision.accumulate_steps",
        doc="The field that receives the accumulation steps when `effective` is set.",
        accepts="a dotted path",
    )
    memory_keys: tuple[str, ...] = domain(
        (),
        doc="Config fields that decide memory: trials equal on them reuse a found size from "
        "the study's cache.",
        accepts="a list of dotted paths",
    )
