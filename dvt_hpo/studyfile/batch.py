"""Section ``batch_size``: the per-trial batch-size search and where its result is written.

Plain fields are checked by the schema engine from :class:`~dvt_hpo.batch.spec.BatchSizeSpec`;
the code here checks the bounds that depend on each other and the paths against the trainer
config (integer fields, not searched, the built-in trainer's fixed paths).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dvt_hpo.batch.spec import BatchSizeSpec
from dvt_hpo.config.hints import describe
from dvt_hpo.config.schema import type_name, value_fits_type
from dvt_hpo.config.source import Key
from dvt_hpo.spec.model import Dimension
from dvt_hpo.studyfile.fields import Reader
from dvt_hpo.studyfile.trainer import config_value, field_type

__all__ = ["read_batch_size"]


def read_batch_size(
    r: Reader,
    root: Mapping[str, Any],
    schema: type | None,
    config: dict[str, Any],
    dims: Sequence[Dimension],
) -> BatchSizeSpec:
    key: Key = ("batch_size",)
    sec = r.section(BatchSizeSpec, root.get("batch_size"), key, "section 'batch_size'")
    defaults = BatchSizeSpec()
    auto = sec.get("auto", defaults.auto)
    path = r.dotted(sec.get("path", defaults.path), (*key, "path"))
    low = sec.get("min", defaults.min)
    # Bounds that depend on min: checked with the engine's wording.
    high = r.value(sec.get("max", max(defaults.max, low)), (*key, "max"), int, ge=low)
    start = r.value(sec.get("start"), (*key, "start"), int | None, ge=low)
    if start is not None and start > high:
        raise r.err(
            (*key, "start"), f"must be in [min, max] = [{low}, {high}] or null, got {start}"
        )
    multiple_of = sec.get("multiple_of", defaults.multiple_of)
    if -(-low // multiple_of) * multiple_of > high:
        raise r.err(
            (*key, "multiple_of"),
            f"no multiple of {multiple_of} lies in [min, max] = [{low}, {high}]",
        )
    tolerance = sec.get("tolerance", defaults.tolerance)
    effective = sec.get("effective")
    if effective is not None and not auto:
        raise r.err(
            (*key, "effective"),
            "an effective batch size is reached by accumulating the batch size the search "
            "finds, which needs batch_size.auto: true",
        )
    accumulate_path = r.dotted(
        sec.get("accumulate_path", defaults.accumulate_path), (*key, "accumulate_path")
    )
    memory_keys = read_memory_keys(r, sec, key)
    search_paths = {d.path: i for i, d in enumerate(dims)}
    checks: list[tuple[str, Key, str, int | None]] = []
    if auto:
        checks.append((path, (*key, "path"), "batch_size.path", low))
        if path in search_paths:
            raise r.err(
                (*key, "path"),
                f"{path!r} is also search_space[{search_paths[path]}].path; with "
                "batch_size.auto: true the batch size is found per trial, not searched "
                "(set auto: false to search it)",
            )
    if effective is not None:
        checks.append((accumulate_path, (*key, "accumulate_path"), "accumulate_path", 1))
        if accumulate_path in search_paths:
            raise r.err(
                (*key, "accumulate_path"),
                f"{accumulate_path!r} is also search_space[{search_paths[accumulate_path]}]"
                ".path; with batch_size.effective set it is computed per trial",
            )
    for i, mkey in enumerate(memory_keys):
        checks.append((mkey, (*key, "memory_keys", i), "memory key", None))
    for target, tkey, what, sample_value in checks:
        if schema is None:
            config_value(r, config, target, tkey, what)
            continue
        tp = field_type(r, schema, target, tkey, what)
        # The field must hold an integer: a float field would turn 64 into 64.0.
        if sample_value is not None and (
            not value_fits_type(sample_value, tp) or (tp is not Any and value_fits_type(0.5, tp))
        ):
            raise r.err(
                tkey, f"{what} {target!r} must be an integer field, it takes {type_name(tp)}"
            )
    if auto and schema is not None and schema.__module__ == "dvt_hpo.train.config":
        # The built-in trainer applies the found size itself, at these two fields.
        for name, value, fixed in (
            ("path", path, defaults.path),
            ("accumulate_path", accumulate_path, defaults.accumulate_path),
        ):
            if value != fixed:
                raise r.err(
                    (*key, name),
                    f"the built-in trainer uses {fixed!r} for batch_size.{name}, got "
                    f"{value!r} (other paths are for custom entry points)",
                )
    return BatchSizeSpec(
        auto=auto,
        path=path,
        min=low,
        max=high,
        start=start,
        multiple_of=multiple_of,
        tolerance=tolerance,  # type: ignore[arg-type]
        effective=effective,
        accumulate_path=accumulate_path,
        memory_keys=memory_keys,
    )


def read_memory_keys(r: Reader, sec: Mapping[str, Any], key: Key) -> tuple[str, ...]:
    mkey = (*key, "memory_keys")
    value = sec.get("memory_keys")
    if value is None:
        return ()
    if not isinstance(value, list):
        raise r.err(
            mkey,
            f"must be a list of dotted config paths such as [model.builder], got {describe(value)}",
        )
    out: list[str] = []
    for i, item in enumerate(value):
        path = r.dotted(item, (*mkey, i))
        if path in out:
            raise r.err((*mkey, i), f"duplicate memory key {path!r}")
        out.append(path)
    return tuple(out)
