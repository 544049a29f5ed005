"""The built-in trainer's resume state (``trials.resume``, docs/resume.md).

Everything the next epoch depends on, so that a resumed run continues bit for bit where a
deterministic one stopped: the model, EMA, optimizer, scheduler and loss scaler, the epoch and
optimizer step counts, the last metrics, the batch size found (the copy does not search again),
and every random state: torch (CPU and CUDA), numpy, Python and the training loader's
generator (its shuffling). Saved through ``ctx.save_state`` (rank 0 writes, at most every
``trials.resume_every_s``), loaded by every rank through ``ctx.load_state``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["Resumed", "capture", "load", "restore_modules", "restore_random"]

_VERSION = 1


@dataclass(frozen=True)
class Resumed:
    """A loaded state: what the trainer continues from."""

    state: dict[str, Any]

    @property
    def next_epoch(self) -> int:
        return int(self.state["epoch"]) + 1

    @property
    def optimizer_steps(self) -> int:
        return int(self.state["optimizer_steps"])

    @property
    def metrics(self) -> dict[str, float]:
        return dict(self.state["metrics"])

    @property
    def batch(self) -> dict[str, int]:
        """``{"data.batch_size": .., "precision.accumulate_steps": ..}`` as trained."""
        return dict(self.state["batch"])

    @property
    def batch_attrs(self) -> dict[str, Any]:
        return dict(self.state.get("batch_attrs") or {})


def load(ctx: Any) -> Resumed | None:
    """The built-in trainer's state saved by this trial's chain, or None (resume off, none
    saved, or not one of this trainer's: then the run starts from epoch 0)."""
    loader = getattr(ctx, "load_state", None)
    state = loader() if loader is not None else None
    if (
        not isinstance(state, dict)
        or state.get("trainer") != "dvt_hpo.train"
        or (state.get("version") != _VERSION)
    ):
        return None
    return Resumed(state)


def capture(
    *,
    epoch: int,
    optimizer_steps: int,
    metrics: dict[str, float],
    batch: dict[str, int],
    batch_attrs: dict[str, Any],
    model: torch.nn.Module,
    ema: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    scaler: Any,
    generator: torch.Generator | None,
) -> dict[str, Any]:
    """The state after ``epoch`` (its scheduler step included)."""
    return {
        "trainer": "dvt_hpo.train",
        "version": _VERSION,
        "epoch": epoch,
        "optimizer_steps": optimizer_steps,
        "metrics": dict(metrics),
        "batch": dict(batch),
        "batch_attrs": dict(batch_attrs),
        "model": model.state_dict(),
        "ema": ema.module.state_dict() if ema is not None else None,
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict(),
        "rng": {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "numpy": np.random.get_state(),
            "python": random.getstate(),
            "loader": generator.get_state() if generator is not None else None,
        },
    }


def restore_modules(
    resumed: Resumed,
    *,
    model: torch.nn.Module,
    ema: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    scaler: Any,
) -> None:
    state = resumed.state
    model.load_state_dict(state["model"])
    if ema is not None and state["ema"] is not None:
        ema.module.load_state_dict(state["ema"])
    optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state["scheduler"] is not None:
        scheduler.load_state_dict(state["scheduler"])
    scaler.load_state_dict(state["scaler"])


def restore_random(resumed: Resumed, generator: torch.Generator | None) -> None:
    """Last, after everything that draws random numbers while it is built."""
    rng = resumed.state["rng"]
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    if generator is not None and rng["loader"] is not None:
        generator.set_state(rng["loader"])
