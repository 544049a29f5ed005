"""Device slots: ``trials.devices`` split among the ``trials.parallel`` trial slots, whole GPUs
or ``trials.per_gpu`` shares of one.

Stdlib only (never imports torch): GPUs are found through ``CUDA_VISIBLE_DEVICES`` or
``nvidia-smi -L``. ``devices`` arrives in the canonical form the spec produced.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from dvt_hpo.exceptions import SpecError

# The canonical ``trials.devices`` (dvt_hpo.studyfile): a keyword, a GPU count, or GPU indexes.
Devices = Literal["auto", "cpu", "cuda"] | int | tuple[int, ...]


@dataclass(frozen=True)
class Slot:
    """Where one trial at a time runs: its GPUs (``CUDA_VISIBLE_DEVICES``) and CPU threads."""

    index: int
    cuda_visible_devices: str | None  # "" hides every GPU; None leaves the variable alone
    omp_num_threads: int | None
    # trials.per_gpu: K > 1 when this slot is one of K sharing its one GPU (1/K of its memory).
    per_gpu: int = 1

    @property
    def gpus(self) -> tuple[str, ...]:
        if not self.cuda_visible_devices:
            return ()
        return tuple(self.cuda_visible_devices.split(","))


def visible_gpus(env: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` entries.

    From ``CUDA_VISIBLE_DEVICES`` when it is set (CUDA stops at the first invalid entry, e.g.
    ``-1``), else from ``nvidia-smi -L``; none where nvidia-smi is missing. Never imports torch.
    """
    env = os.environ if env is None else env
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is not None:
        entries: list[str] = []
        for entry in (e.strip() for e in value.split(",")):
            if not entry or entry.startswith("-"):
                break
            entries.append(entry)
        return entries
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    n = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    return [str(i) for i in range(n)]


def split_devices(
    devices: Devices,
    parallel: int,
    *,
    nproc_per_node: int = 1,
    per_gpu: int = 1,
    cpu_count: int | None = None,
    gpus: Sequence[str] | int | None = None,
) -> list[Slot]:
    """Split ``trials.devices`` (canonical, as the spec produced it) into ``parallel`` slots.

    - ``"auto"``: every visible GPU if there is one, else the CPU.
    - ``"cpu"``: no GPU (``CUDA_VISIBLE_DEVICES=""``).
    - ``"cuda"``: every visible GPU (an error where there is none).
    - an int N: the first N visible GPUs (as in deepvisiontools an int is a count; the number of
      processes of a trial is ``trials.nproc_per_node``).
    - a tuple of ints: those GPUs, by index among the visible ones (the physical ids when
      ``CUDA_VISIBLE_DEVICES`` is unset).

    With ``per_gpu`` 1, GPUs are split evenly in contiguous blocks (a remainder stays unused, so
    all slots are alike); each slot needs one GPU per process. With ``per_gpu`` K > 1, each GPU
    holds K slots of one process each, every one with a 1/K memory share (:mod:`dvt_hpo.
    gpu_share`); the slots are dealt round-robin over the GPUs, so fewer than ``GPUs x K`` of
    them spread out, and any contiguous block of them re-split over its own GPUs (a worker of
    ``--workers``) gives the same GPUs back. Where ``"auto"`` finds no GPU, ``per_gpu`` has
    nothing to share and is ignored. CPU cores are split evenly among all the processes of all
    slots through ``OMP_NUM_THREADS`` (at least 1). ``gpus`` is the list of visible GPUs (an int
    N means "0".."N-1"); None detects them with :func:`visible_gpus`.
    """
    if parallel < 1:
        raise SpecError(f"must be >= 1, got {parallel}", field="trials.parallel")
    if nproc_per_node < 1:
        raise SpecError(f"must be >= 1, got {nproc_per_node}", field="trials.nproc_per_node")
    if per_gpu < 1:
        raise SpecError(f"must be >= 1, got {per_gpu}", field="trials.per_gpu")
    cpus = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    threads = max(1, cpus // (parallel * nproc_per_node))
    selected = select_gpus(devices, gpus)
    if not selected:
        return [Slot(i, "", threads) for i in range(parallel)]
    if per_gpu > 1:
        return _shared_slots(devices, selected, parallel, nproc_per_node, per_gpu, threads)
    per_slot = len(selected) // parallel
    if per_slot < 1:
        raise SpecError(
            f"{_show(devices)} selects {len(selected)} GPU(s) ({','.join(selected)}) but "
            f"trials.parallel={parallel} needs at least one per trial slot (or share the GPUs: "
            "trials.per_gpu)",
            field="trials.devices",
        )
    if per_slot < nproc_per_node:
        raise SpecError(
            f"{_show(devices)} gives each of the {parallel} slot(s) {per_slot} GPU(s) but "
            f"trials.nproc_per_node={nproc_per_node} needs one per process "
            f"({parallel * nproc_per_node} in all)",
            field="trials.devices",
        )
    return [
        Slot(i, ",".join(selected[i * per_slot : (i + 1) * per_slot]), threads)
        for i in range(parallel)
    ]


def _shared_slots(
    devices: Devices,
    selected: Sequence[str],
    parallel: int,
    nproc_per_node: int,
    per_gpu: int,
    threads: int,
) -> list[Slot]:
    if nproc_per_node > 1:
        # Each rank of a DDP trial would take a share of another GPU: K such trials would
        # meet on the same GPUs with K NCCL communicators, and one rank's OOM ends its trial
        # on every GPU. Packing is for trials that fit in one process on one GPU.
        raise SpecError(
            f"per_gpu={per_gpu} packs trials of one process each onto a GPU, but "
            f"trials.nproc_per_node={nproc_per_node} spreads a trial over "
            f"{nproc_per_node} GPUs; use per_gpu: 1 with nproc_per_node > 1",
            field="trials.per_gpu",
        )
    capacity = len(selected) * per_gpu
    if parallel > capacity:
        raise SpecError(
            f"trials.parallel={parallel} but {_show(devices)} selects {len(selected)} GPU(s) "
            f"({','.join(selected)}) x trials.per_gpu={per_gpu} = {capacity} trial slot(s); "
            f"lower trials.parallel to {capacity} or raise trials.per_gpu",
            field="trials.parallel",
        )
    return [Slot(i, selected[i % len(selected)], threads, per_gpu) for i in range(parallel)]


def select_gpus(devices: Devices, gpus: Sequence[str] | int | None = None) -> list[str]:
    """The GPUs ``trials.devices`` selects, as ``CUDA_VISIBLE_DEVICES`` entries; ``[]`` for
    the CPU (``"cpu"``, or ``"auto"`` where none is visible). ``gpus`` as in
    :func:`split_devices`."""
    field = "trials.devices"
    if devices == "cpu":
        return []
    if gpus is None:
        available = visible_gpus()
    elif isinstance(gpus, int):
        available = [str(i) for i in range(gpus)]
    else:
        available = [str(g) for g in gpus]
    if devices == "auto":
        return available
    if devices == "cuda":
        if not available:
            raise SpecError(
                "'cuda' asks for the GPUs but none is visible (CUDA_VISIBLE_DEVICES / "
                "nvidia-smi -L); use 'auto' or 'cpu'",
                field=field,
            )
        return available
    if isinstance(devices, int) and not isinstance(devices, bool):
        if devices < 1:
            raise SpecError(
                f"an int is a number of GPUs and must be >= 1, got {devices}; use 'cpu' for none",
                field=field,
            )
        if devices > len(available):
            raise SpecError(
                f"{devices} asks for {devices} GPUs but {len(available)} are visible "
                f"({','.join(available) or 'none'}); use 'auto' or 'cpu'",
                field=field,
            )
        return available[:devices]
    if isinstance(devices, tuple) and devices and all(_is_index(i) for i in devices):
        if len(set(devices)) != len(devices):
            raise SpecError(f"lists a GPU twice: {list(devices)!r}", field=field)
        bad = [i for i in devices if i >= len(available)]
        if bad:
            raise SpecError(
                f"GPU index {bad[0]} is not visible: {len(available)} GPU(s) are "
                f"({','.join(available) or 'none'}); got {list(devices)!r}",
                field=field,
            )
        return [available[i] for i in devices]
    # The spec canonicalizes every accepted spelling; anything else is a caller's bug.
    raise SpecError(
        "must be 'auto', 'cpu', 'cuda', a number of GPUs, or a tuple of GPU indexes; "
        f"got {devices!r}",
        field=field,
    )


def packing_text(slots: Sequence[Slot], per_gpu: int = 1) -> str:
    """Where the trial slots run, for ``validate`` and the run's start line, e.g.
    ``"2 per GPU (GPU 0: 2, GPU 1: 2), each with 1/2 of its GPU's memory"``."""
    if not slots or not slots[0].gpus:
        if per_gpu > 1:
            return f"on the CPU (trials.per_gpu={per_gpu} ignored: no GPU is visible)"
        return "on the CPU"
    if slots[0].per_gpu == 1:
        blocks = " | ".join(slot.cuda_visible_devices or "" for slot in slots)
        n = len(slots[0].gpus)
        return f"{n} GPU{'s' if n != 1 else ''} per trial (GPU {blocks})"
    counts: dict[str, int] = {}
    for slot in slots:
        counts[slot.gpus[0]] = counts.get(slot.gpus[0], 0) + 1
    where = ", ".join(f"GPU {gpu}: {n}" for gpu, n in counts.items())
    most = max(counts.values())
    k = slots[0].per_gpu
    return f"{most} per GPU ({where}), each with 1/{k} of its GPU's memory"


def _is_index(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _show(devices: Devices) -> str:
    return repr(list(devices)) if isinstance(devices, tuple) else repr(devices)


__all__ = ["Devices", "Slot", "packing_text", "select_gpus", "split_devices", "visible_gpus"]
