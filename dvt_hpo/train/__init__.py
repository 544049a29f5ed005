"""The built-in torch trainer (entry point ``dvt_hpo.train:run``).

Importing this package does not import torch: the orchestrator uses :class:`TrainerConfig` to
validate configs, and torch is imported only when :func:`run` or :func:`train_file` trains.
"""

from __future__ import annotations

from typing import Any

from dvt_hpo.train.config import TrainerConfig, load_trainer_config

__all__ = ["TrainerConfig", "load_trainer_config", "run"]


def run(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    """Train with ``config`` (a plain dict, see :class:`TrainerConfig`), reporting to ``ctx``."""
    from dvt_hpo.train.trainer import run as _run

    return _run(config, ctx)
