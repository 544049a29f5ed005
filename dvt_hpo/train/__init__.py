"""The built-in torch trainer (entry point ``dvt_hpo.train:run``).

Importing this package does not import torch: the orchestrator uses :class:`TrainerConfig` to
validate configs, and torch is imported only when :func:`run` or :func:`train_file` trains.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from dvt_hpo.train.config import TrainerConfig, apply_overrides, load_trainer_config

__all__ = ["TrainerConfig", "apply_overrides", "load_trainer_config", "run", "train_file"]


def run(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    """Train with ``config`` (a plain dict, see :class:`TrainerConfig`), reporting to ``ctx``."""
    from dvt_hpo.train.trainer import run as _run

    return _run(config, ctx)


def train_file(path: str | os.PathLike[str], overrides: Iterable[str] = ()) -> dict[str, float]:
    """Train the YAML trainer config at ``path`` in this process (``dvt-hpo train``).

    Prints one line per epoch and returns the final metrics; checkpoints as configured.
    """
    from dvt_hpo.train.trainer import run as _run
    from dvt_hpo.trial.context import LocalContext

    cfg = load_trainer_config(path, overrides)
    return _run(cfg, LocalContext())
