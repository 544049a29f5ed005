"""Applying a trial's GPU share (``trials.per_gpu``) in the trial process: the CUDA allocator's
cap, and the memory the batch-size probes may count on. The arithmetic and the payload's
:class:`~dvt_hpo.devices.gpu_share.GpuShare` are :mod:`dvt_hpo.devices.gpu_share` (stdlib)."""

from __future__ import annotations

from typing import Any

from dvt_hpo.devices.gpu_share import GpuShare, memory_fraction
from dvt_hpo.exceptions import GpuShareError

# What apply_share set in this process, by device index: for a torch without the getter.
_applied: dict[int, float] = {}


def apply_share(share: GpuShare | None) -> dict[int, float]:
    """Cap this process's CUDA allocator at its share on every GPU it sees (one, in a packed
    slot); ``{device index: fraction}``, empty when there is no share or no CUDA.

    Call it before anything is allocated on the GPU: the cap does not take back memory the
    allocator already holds.
    """
    if share is None:
        return {}
    try:
        import torch
    except ImportError as exc:
        raise GpuShareError(
            f"trials.per_gpu={share.per_gpu} caps each trial's GPU memory through torch, which "
            f"this trial's Python cannot import ({exc}); use per_gpu: 1"
        ) from None

    if not torch.cuda.is_available():
        return {}
    applied: dict[int, float] = {}
    for index in range(torch.cuda.device_count()):
        total = torch.cuda.get_device_properties(index).total_memory
        fraction = memory_fraction(share, total)
        torch.cuda.set_per_process_memory_fraction(fraction, index)
        applied[index] = fraction
    _applied.update(applied)
    return applied


def allowed_bytes(device: Any) -> int:
    """The bytes this process's allocator may hold on CUDA ``device``: the device's memory
    times the fraction set by :func:`apply_share` (the whole device when none was set). The
    batch-size probes report this as the memory available, so the search aims at the share."""
    import torch

    total = int(torch.cuda.get_device_properties(device).total_memory)
    get = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if get is not None:
        fraction = float(get(device))
    else:  # an older torch has no getter: what apply_share set here
        index = device.index if isinstance(device, torch.device) else device
        fraction = _applied.get(int(index or 0), 1.0)
    return int(total * fraction)


__all__ = ["allowed_bytes", "apply_share"]
