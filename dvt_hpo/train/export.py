"""``dvt-hpo best --export`` for a trainer entry point other than the built-in one (the
deepvisiontools backend, your own ``run(config, ctx)``), and ``dvt-hpo train`` of that export.

The built-in trainer's export is its trainer config, which ``dvt-hpo train`` reads as one. Any
other entry point's config means nothing without the entry point, so its export names it, with
the folder trials import it from and run in (the study file's)::

    # trial 3 of study 'dvt-segmentation'
    entrypoint: dvt_hpo.backends.deepvisiontools:run
    cwd: /home/me/studies/deepvisiontools
    config: {epochs: 4, model_spec: {...}, data: {train: /home/me/.../train, ...}, ...}

``dvt-hpo train best.yaml`` imports the entry point as a trial does (the study folder first)
and calls it once, in that folder, with a local ``ctx`` that prints each epoch's report and
never prunes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dvt_hpo.config.hints import describe
from dvt_hpo.exceptions import SpecError

__all__ = ["EntryPointExport", "entrypoint_export", "read_entrypoint_export", "run_export"]

_KEYS = ("study", "trial", "entrypoint", "cwd", "config")


@dataclass(frozen=True)
class EntryPointExport:
    entrypoint: str
    cwd: str
    config: dict[str, Any]
    study: str | None = None
    trial: int | None = None


def entrypoint_export(
    study: str, trial: int, entrypoint: str, cwd: Path, config: Mapping[str, Any]
) -> dict[str, Any]:
    """The export of a trial as plain data (its ``config``: the one it ran with)."""
    return {
        "study": study,
        "trial": trial,
        "entrypoint": entrypoint,
        "cwd": str(cwd),
        "config": dict(config),
    }


def read_entrypoint_export(path: Path) -> EntryPointExport | None:
    """The entry-point export at ``path``, or ``None`` when it is not one."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None  # the trainer config reader says what is wrong with it
    if not isinstance(data, Mapping) or "entrypoint" not in data or "config" not in data:
        return None
    where = str(path)
    unknown = [k for k in data if k not in _KEYS]
    if unknown:
        raise SpecError(
            f"unknown key {unknown[0]!r} in an entry-point export (keys: {', '.join(_KEYS)})",
            file=where,
        )
    entrypoint, cwd, config = data["entrypoint"], data.get("cwd", "."), data["config"]
    if not isinstance(entrypoint, str) or ":" not in entrypoint:
        raise SpecError(
            f"must be 'package.module:function', got {describe(entrypoint)}",
            file=where,
            field="entrypoint",
        )
    if not isinstance(config, Mapping):
        raise SpecError(f"must be a mapping, got {describe(config)}", file=where, field="config")
    folder = (path.parent / str(cwd)).resolve()
    if not folder.is_dir():
        raise SpecError(f"no such folder: {cwd!r}", file=where, field="cwd")
    trial = data.get("trial")
    return EntryPointExport(
        entrypoint=entrypoint,
        cwd=str(folder),
        config=dict(config),
        study=data.get("study") if isinstance(data.get("study"), str) else None,
        trial=trial if isinstance(trial, int) else None,
    )


@contextlib.contextmanager
def _in_folder(folder: str) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def run_export(export: EntryPointExport) -> dict[str, float]:
    """Train the export once: its entry point called in its folder with a local ``ctx``."""
    from dvt_hpo.process.import_path import study_imports
    from dvt_hpo.trial.context import LocalContext
    from dvt_hpo.trial.ending import metrics_of
    from dvt_hpo.trial.main import resolve_entrypoint

    what = f"trial {export.trial}" if export.trial is not None else "the export"
    print(f"training {what} with {export.entrypoint} in {export.cwd}", flush=True)
    with _in_folder(export.cwd), study_imports(Path(export.cwd)):
        function = resolve_entrypoint(export.entrypoint)
        metrics = metrics_of(function(export.config, LocalContext()))
    shown = ", ".join(f"{k}={v:.6g}" for k, v in metrics.items())
    print(f"done: {shown or 'no metrics returned'}", flush=True)
    return metrics
