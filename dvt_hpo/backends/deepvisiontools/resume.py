"""``trials.resume`` for the deepvisiontools backend, through its own ``Trainer.fit(resume=)``.

deepvisiontools' checkpointing stays off (its hook would also write best and periodic files);
this module writes the library's own training-state checkpoint (``_collect_state``: epoch,
global step, model, optimizer, scheduler, scaler, EMA) where ``fit(resume=<folder>)`` looks
for the latest one, ``<ctx.resume_dir>/checkpoints/checkpoint_epochNNNN.pt``, atomically and
latest only, on rank 0, at most every ``trials.resume_every_s``. The random states the library
does not restore (torch, Python, the training loader's generator) travel in the same file and
are set back before the first resumed epoch. Every rank resumes from the same file.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import IO, Any

import torch
from deepvisiontools.train.hooks import _collect_state

from dvt_hpo.atomic import write_atomic

__all__ = ["latest", "restore_random", "save"]

_RNG_KEY = "dvt_hpo_rng"
_PATTERN = "checkpoint_epoch*.pt"  # CheckpointManager.latest("checkpoint")


def _folder(ctx: Any) -> Path | None:
    folder = getattr(ctx, "resume_dir", None)
    return Path(folder) / "checkpoints" if folder is not None else None


def latest(ctx: Any) -> Path | None:
    """The checkpoint to pass to ``fit(resume=...)``, or None (resume off, none saved, or
    unreadable: then one line says so and the trial starts from epoch 0)."""
    folder = _folder(ctx)
    found = sorted(folder.glob(_PATTERN)) if folder is not None and folder.is_dir() else []
    if not found:
        return None
    try:
        torch.load(str(found[-1]), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a resume must never be worse than none
        if getattr(ctx, "is_chief", True):
            print(
                f"dvt-hpo: resume state {found[-1]} unreadable ({type(exc).__name__}: {exc}): "
                "starting from epoch 0",
                file=sys.stderr,
                flush=True,
            )
        return None
    return found[-1]


def _generator(trainer: Any) -> torch.Generator | None:
    generator = getattr(getattr(trainer, "train_loader", None), "generator", None)
    return generator if isinstance(generator, torch.Generator) else None


def save(ctx: Any, trainer: Any, epoch: int, *, force: bool = False) -> None:
    """After ``epoch`` (reported, not the last), when a save is due (or ``force``: a pause):
    the state, rank 0."""
    due = getattr(ctx, "resume_due", None)
    folder = _folder(ctx)
    if folder is None or due is None or epoch + 1 >= int(trainer.epochs):
        return
    if not force and not due():
        return
    began = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    state = dict(_collect_state(trainer))
    generator = _generator(trainer)
    state[_RNG_KEY] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "loader": generator.get_state() if generator is not None else None,
    }
    path = folder / f"checkpoint_epoch{epoch:04d}.pt"

    def write(f: IO[bytes]) -> None:
        torch.save(state, f)

    write_atomic(path, write)
    for old in folder.glob(_PATTERN):
        if old != path:
            old.unlink(missing_ok=True)
    ctx.mark_saved(path, step=epoch, save_s=time.perf_counter() - began)


def restore_random(path: Path, trainer: Any) -> None:
    """The random states saved with ``path`` (the library restores the rest in ``fit``)."""
    state = torch.load(str(path), map_location="cpu", weights_only=True)
    rng = state.get(_RNG_KEY)
    if not isinstance(rng, dict):
        return
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    generator = _generator(trainer)
    if generator is not None and rng.get("loader") is not None:
        generator.set_state(rng["loader"])
