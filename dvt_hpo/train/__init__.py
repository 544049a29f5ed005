"""The built-in torch trainer (entry point ``dvt_hpo.train:run``).

Importing this package does not import torch: the orchestrator uses :class:`TrainerConfig` to
validate configs, and torch is imported only when :func:`run` or :func:`train_file` trains.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dvt_hpo.train.config import TrainerConfig, apply_overrides, load_trainer_config

__all__ = [
    "TrainerConfig",
    "apply_overrides",
    "load_trainer_config",
    "run",
    "summary_line",
    "train_file",
]


def run(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    """Train with ``config`` (a plain dict, see :class:`TrainerConfig`), reporting to ``ctx``."""
    from dvt_hpo.train.builtin import run as _run

    return _run(config, ctx)


def train_file(path: str | os.PathLike[str], overrides: Iterable[str] = ()) -> dict[str, float]:
    """Train the YAML trainer config at ``path`` in this process (``dvt-hpo train``).

    Prints one line per epoch and returns the final metrics; checkpoints as configured.
    """
    from dvt_hpo.train.builtin import run as _run
    from dvt_hpo.trial.context import LocalContext

    cfg = load_trainer_config(path, overrides)
    ctx = LocalContext()
    result = _run(cfg, ctx)
    print(summary_line(cfg, ctx.history), flush=True)
    return result


def summary_line(cfg: TrainerConfig, history: Sequence[tuple[int, Mapping[str, float]]]) -> str:
    """The line a training ends with: its best epoch on ``checkpoint.monitor`` (the study's
    objective in a ``best --export``), that value, and the best checkpoint's path."""
    monitor, mode = cfg.checkpoint.monitor, cfg.checkpoint.mode
    scored = [
        (step, float(m[monitor]))
        for step, m in history
        if monitor in m and math.isfinite(float(m[monitor]))
    ]
    if not scored:
        return f"done: {monitor!r} was never reported as a finite number"
    sign = 1.0 if mode == "max" else -1.0
    step, value = max(scored, key=lambda sv: (sign * sv[1], -sv[0]))
    if cfg.checkpoint.enable_checkpointing:
        # Where the trainer's Checkpointer writes it.
        folder = Path(cfg.checkpoint.dir or Path(cfg.output_dir) / "checkpoints")
        where = f"checkpoint {folder / 'best.pt'}"
    else:
        where = "no checkpoint (checkpoint.enable_checkpointing: false)"
    return (
        f"done: best epoch {step} of {len(history)}, {monitor}={value:.6f} "
        f"(checkpoint.monitor, {mode}); {where}"
    )
