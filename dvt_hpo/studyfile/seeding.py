"""``study.enqueue`` and ``study.warm_start``: configs a study runs first.

``enqueue`` is a list of ``{dimension name: value}`` checked here against the search space:
an unknown name, or a value outside a range or not among the choices, is refused naming the
entry. An entry may leave dimensions out: the sampler draws them, as with Optuna's
``enqueue_trial`` (a partial config is how one pins ``lr`` and lets the rest vary).
``warm_start`` names an earlier study, read only when the study runs
(:mod:`dvt_hpo.study.seeding`), since ``validate`` touches no database. :func:`misfit` is the
one rule for "a value fits this dimension", used for both.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from dvt_hpo.config.hints import describe, did_you_mean
from dvt_hpo.config.source import Key
from dvt_hpo.spec.model import Dimension, StudySection, WarmStartSpec
from dvt_hpo.studyfile.fields import Reader

__all__ = ["misfit", "read_seeding"]


def _same(a: Any, b: Any) -> bool:
    # As dvt_hpo.sampling.space.same_value: True is not 1 here.
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return a == b


def misfit(dim: Dimension, value: Any) -> str | None:
    """Why ``value`` is not a value ``dim`` can take (None when it is)."""
    if dim.kind == "bool":
        return None if isinstance(value, bool) else "must be true or false"
    if dim.kind == "categorical":
        choices = list(dim.choices or ())
        if any(_same(value, c) for c in choices):
            return None
        return f"must be one of the choices {choices}"
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    low, high = dim.low, dim.high
    if dim.kind == "int" and not (number and float(value).is_integer()):
        return f"must be an integer in [{low}, {high}]"
    if not number or not math.isfinite(float(value)):
        return f"must be a number in [{low}, {high}]"
    if low is not None and high is not None and not float(low) <= float(value) <= float(high):
        return f"must be in [{low}, {high}]"
    step = dim.step
    if step and low is not None:
        steps = (float(value) - float(low)) / float(step)
        if abs(steps - round(steps)) > 1e-8:
            return f"must be on the grid {low} + k * {step}"
    return None


def read_seeding(
    r: Reader, root: Mapping[str, Any], study: StudySection, dims: Sequence[Dimension]
) -> StudySection:
    """``study`` with ``enqueue`` and ``warm_start`` read and checked against ``dims``."""
    raw = root.get("study")
    sec = raw if isinstance(raw, Mapping) else {}
    enqueue = _read_enqueue(r, sec.get("enqueue"), dims)
    warm = _read_warm_start(r, sec.get("warm_start"), study)
    return dataclasses.replace(study, enqueue=enqueue, warm_start=warm)


def _read_enqueue(r: Reader, value: Any, dims: Sequence[Dimension]) -> tuple[dict[str, Any], ...]:
    key: Key = ("study", "enqueue")
    if value is None:
        return ()
    example = "[{lr: 0.001, width: 64}, ...]"
    if not isinstance(value, list):
        raise r.err(key, f"must be a list of configs such as {example}, got {describe(value)}")
    by_name = {d.name: d for d in dims}
    entries: list[dict[str, Any]] = []
    for i, entry in enumerate(value):
        ekey = (*key, i)
        if not isinstance(entry, dict) or not entry:
            raise r.err(
                ekey,
                f"entry {i} must be a mapping of search_space names to values such as "
                f"{{lr: 0.001}}, got {describe(entry)}",
            )
        for name, item in entry.items():
            dim = by_name.get(name) if isinstance(name, str) else None
            if dim is None:
                raise r.err(
                    (*ekey, name),
                    f"entry {i}: {name!r} is not a search_space name"
                    f"{did_you_mean(str(name), list(by_name))} (names: {', '.join(by_name)})",
                )
            why = misfit(dim, item)
            if why is not None:
                raise r.err(
                    (*ekey, name), f"entry {i}: {name} {why} (search_space), got {describe(item)}"
                )
        if entry in entries:
            raise r.err(ekey, f"entry {i} repeats an earlier entry: {entry}")
        entries.append(dict(entry))
    return tuple(entries)


def _read_warm_start(r: Reader, value: Any, study: StudySection) -> WarmStartSpec | None:
    if value is None:
        return None
    key: Key = ("study", "warm_start")
    if isinstance(value, str):
        value = {"study": value}
    fields = r.section(WarmStartSpec, value, key, "study.warm_start")
    if "study" not in fields:
        raise r.err(key, "needs the earlier study's name: {study: NAME, top: 5}")
    storage = study.storage
    if fields.get("storage") is not None:
        # Lazy: studyfile.study imports this module's callers' section readers.
        from dvt_hpo.studyfile.study import read_storage

        storage = read_storage(r, fields, key, fields["study"])
    if fields["study"] == study.name and storage == study.storage:
        raise r.err(
            (*key, "study"),
            f"names this study ({study.name!r}) on its own storage; warm_start starts from an "
            "earlier, other study",
        )
    return WarmStartSpec(
        study=fields["study"],
        storage=storage,
        top=fields.get("top", 5),
        copy_results=fields.get("copy_results", False),
    )
