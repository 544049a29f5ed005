"""A trial's share of a GPU under ``trials.per_gpu: K``: the arithmetic, and applying it.

K trial processes share one GPU. Each caps its CUDA caching allocator at its share with
``torch.cuda.set_per_process_memory_fraction`` before it allocates anything, so a trial that
asks for more than its share gets an out-of-memory error of its own while its neighbours keep
theirs, and the batch-size search (whose memory figures are the share, not the whole GPU) finds
a size that fits next to K-1 others.

The cap covers the allocator only. Each process also holds memory the allocator never sees:
the CUDA context and the kernels loaded into it (several hundred MiB), NCCL's buffers. So each
share leaves :data:`CONTEXT_RESERVE_BYTES` per trial out:
``fraction = (total - K * reserve) / (K * total)``.

Stdlib only: the orchestrator puts a :class:`GpuShare` in the payload; the trial process
applies it with :func:`dvt_hpo.devices.gpu_cap.apply_share`, which imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from dvt_hpo.config.units import format_bytes
from dvt_hpo.exceptions import GpuShareError

# What one trial process holds on its GPU outside the caching allocator: the CUDA context with
# its lazily loaded kernels, cuDNN/cuBLAS handles, NCCL buffers. 1 GiB is ample on recent GPUs
# and under 1% of an 80-141 GiB one.
CONTEXT_RESERVE_BYTES = 1 << 30


@dataclass(frozen=True)
class GpuShare:
    """What a trial process under ``trials.per_gpu`` receives in its payload."""

    per_gpu: int  # K trials share the GPU; this trial may use 1/K of it
    reserve_bytes: int = CONTEXT_RESERVE_BYTES  # per trial, outside the allocator's cap

    def __post_init__(self) -> None:
        if isinstance(self.per_gpu, bool) or not isinstance(self.per_gpu, int):
            raise TypeError(f"per_gpu must be an int, got {self.per_gpu!r}")
        if self.per_gpu < 2:
            raise ValueError(f"a GPU share needs per_gpu >= 2, got {self.per_gpu}")
        if isinstance(self.reserve_bytes, bool) or not isinstance(self.reserve_bytes, int):
            raise TypeError(f"reserve_bytes must be an int, got {self.reserve_bytes!r}")
        if self.reserve_bytes < 0:
            raise ValueError(f"reserve_bytes must be >= 0, got {self.reserve_bytes}")

    def label(self) -> str:
        return f"1/{self.per_gpu}"


def memory_fraction(share: GpuShare, total_bytes: int) -> float:
    """The fraction of a GPU of ``total_bytes`` one trial's allocator may use.

    Raises :class:`GpuShareError` when the K reserves take the whole GPU.
    """
    usable = total_bytes - share.per_gpu * share.reserve_bytes
    if usable <= 0:
        raise GpuShareError(
            f"trials.per_gpu={share.per_gpu} leaves no memory per trial on a GPU of "
            f"{format_bytes(total_bytes)}: each trial keeps {format_bytes(share.reserve_bytes)} "
            "for its CUDA context; lower trials.per_gpu"
        )
    return usable / (share.per_gpu * total_bytes)


__all__ = ["CONTEXT_RESERVE_BYTES", "GpuShare", "memory_fraction"]
