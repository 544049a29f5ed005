"""Tune deepvisiontools trainings (https://pypi.org/project/deepvisiontools/, AGPL-3.0).

In a study file::

    trainer:
      entrypoint: dvt_hpo.backends.deepvisiontools:run
      schema: dvt_hpo.backends.deepvisiontools:BackendConfig
      config_file: trainer.yaml   # the trainer: block of its YAML, plus data: and settings:

Importing this package imports neither torch nor deepvisiontools (``dvt-hpo validate`` reads
:class:`BackendConfig`); :func:`run` pays deepvisiontools' import in the trial process only,
after the environment points every output into the trial's folder.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from dvt_hpo.backends.deepvisiontools.schema import BackendConfig
from dvt_hpo.schema import from_mapping


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

    return train(config, replace(spec, data=data), folders, ctx)


__all__ = ["BackendConfig", "run"]
