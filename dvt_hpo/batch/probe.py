"""What every trainer's batch-size probe shares around its own steps: the memory figures.

A trainer gives its ``steps(n)``: real steps at batch size ``n`` (its model, its loader, its
precision). :func:`measuring` makes of them the ``fits(n)`` the search calls: before the steps
:func:`start` resets the device's peak, after them :func:`measured` gives the
:class:`~dvt_hpo.batch.search.Probe` the search reads (the peak, and the memory this trial may
use: its share of the GPU under ``trials.per_gpu``, else the whole GPU), and :func:`release`
frees what the probe left, the frames of a propagating error included (:func:`forget_frames`).
On CPU the search needs no figures (``True``: it fit). Imports torch: trial side only.
"""

from __future__ import annotations

import gc
import traceback
from collections.abc import Callable

import torch

from dvt_hpo.batch.search import Probe
from dvt_hpo.devices.gpu_cap import allowed_bytes


def start(device: torch.device) -> None:
    """Before the probe's steps: the peak is this probe's alone."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def measured(device: torch.device) -> Probe | bool:
    """After the probe's steps ran: its peak and the memory allowed on CUDA, ``True`` elsewhere."""
    if device.type != "cuda":
        return True
    torch.cuda.synchronize(device)
    return Probe(
        fits=True,
        peak_bytes=torch.cuda.max_memory_allocated(device),
        available_bytes=allowed_bytes(device),
    )


def forget_frames(exc: BaseException) -> None:
    """The traceback's frames (a layer's forward, say) still hold activations: clear them, so
    the memory is free before the search decides what to do with the error."""
    traceback.clear_frames(exc.__traceback__)


def release(device: torch.device) -> None:
    """After a probe, once its locals are dropped: give CUDA memory back before the next one
    measures its peak. A full collection costs ~0.2 s with torch loaded: worth it on CUDA, not
    on CPU, where reference counting already freed the tensors (and the search collects after
    an out-of-memory error)."""
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()


def measuring(
    steps: Callable[[int], object], device: torch.device
) -> Callable[[int], Probe | bool]:
    """The ``fits(n)`` for ``ctx.find_batch_size``: ``steps(n)`` between :func:`start` and
    :func:`measured`. An error (out of memory or not) propagates to the search, with the
    frames of ``steps`` cleared first; the memory is released either way. ``steps`` keeps its
    tensors in its own locals, so they are gone once it returns or its frames are cleared."""

    def fits(n: int) -> Probe | bool:
        try:
            start(device)
            steps(n)
            return measured(device)
        except BaseException as exc:
            forget_frames(exc)
            raise
        finally:
            release(device)

    return fits


__all__ = ["forget_frames", "measured", "measuring", "release", "start"]
