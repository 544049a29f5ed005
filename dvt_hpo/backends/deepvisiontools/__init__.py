"""Tune deepvisiontools trainings (https://pypi.org/project/deepvisiontools/, AGPL-3.0).

In a study file::

    trainer:
      entrypoint: dvt_hpo.backends.deepvisiontools:run
      schema: dvt_hpo.backends.deepvisiontools:BackendConfig
      config_file: trainer.yaml   # the trainer: block of its YAML, plus data: and settings:

Importing this package imports neither torch nor deepvisiontools (``dvt-hpo validate`` reads
:class:`BackendConfig`); :func:`run` pays deepvisiontools' import in the trial process only,
after the environment points every output into the trial's folder. With warm starts the
template pays it once instead (:func:`__dvt_hpo_warm__`), inside the study's runs folder.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from dvt_hpo.backends.deepvisiontools.schema import BackendConfig
from dvt_hpo.config.schema import from_mapping
from dvt_hpo.wire.protocol import ENV_LAUNCHED


def __dvt_hpo_warm__(folder: Path) -> None:
    """The warm template's hook (:mod:`dvt_hpo.process.warm`): import torch and deepvisiontools once,
    isolated as a trial is, in ``folder`` (under the study's runs folder): importing
    deepvisiontools writes ultralytics' settings file under ``$HOME`` and matplotlib's font
    cache, and those libraries keep the paths they computed at import. Each forked trial then
    points its environment and working directory at its own folder in :func:`run`; what it
    writes goes there (its run folder, MLflow store and TensorBoard folder are explicit paths
    computed per trial)."""
    from dvt_hpo.backends.deepvisiontools import isolation

    isolation.enter(isolation.TrialFolders.under(folder))
    # Imports only: a torch operation here would start torch's thread pool before the fork.
    import dvt_hpo.backends.deepvisiontools.training  # noqa: F401


def run(config: Mapping[str, Any], ctx: Any) -> dict[str, float]:
    """Train ``config`` (see :class:`BackendConfig`) with deepvisiontools, reporting each epoch
    to ``ctx``; returns the last epoch's metrics with ``epochs_run`` and ``n_params``."""
    from dvt_hpo.backends.deepvisiontools import isolation

    spec: BackendConfig = from_mapping(BackendConfig, dict(config), source="trainer.config")
    # Relative dataset roots are relative to where the trial starts (the study's folder),
    # before the trial moves into its own working directory.
    data = replace(
        spec.data,
        train=str(Path(spec.data.train).expanduser().resolve()),
        valid=str(Path(spec.data.valid).expanduser().resolve()) if spec.data.valid else None,
    )
    trial_dir = getattr(ctx, "trial_dir", None)
    if trial_dir is None:  # outside a study: a folder of its own under the current one
        trial_dir = Path.cwd() / "runs" / f"deepvisiontools-{time.strftime('%Y%m%d-%H%M%S')}"
    folders = isolation.TrialFolders.under(Path(trial_dir))
    isolation.enter(folders)

    from dvt_hpo.backends.deepvisiontools.training import train

    ready_s = _since_launch()
    if ready_s is not None and hasattr(ctx, "set_user_attrs"):
        # The trial process's startup_s ends when run() is called; the heavy imports come after.
        ctx.set_user_attrs({"ready_s": ready_s})
    return train(config, replace(spec, data=data), folders, ctx)


def _since_launch() -> float | None:
    """Seconds since the orchestrator launched this trial (None outside a study)."""
    try:
        return round(time.time() - float(os.environ[ENV_LAUNCHED]), 4)
    except (KeyError, ValueError):
        return None


__all__ = ["BackendConfig", "run"]
