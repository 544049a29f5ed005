"""Device slots: ``trials.devices`` split among the ``trials.parallel`` trial slots.

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

    GPUs are split evenly in contiguous blocks (a remainder stays unused, so all slots are
    alike); each slot needs one GPU per process. CPU cores are split evenly among all the
    processes of all slots through ``OMP_NUM_THREADS`` (at least 1). ``gpus`` is the list of
    visible GPUs (an int N means "0".."N-1"); None detects them with :func:`visible_gpus`.
    """
    field = "trials.devices"
    if parallel < 1:
        raise SpecError(f"must be >= 1, got {parallel}", field="trials.parallel")
    if nproc_per_node < 1:
        raise SpecError(f"must be >= 1, got {nproc_per_node}", field="trials.nproc_per_node")
    cpus = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    threads = max(1, cpus // (parallel * nproc_per_node))

    def cpu_slots() -> list[Slot]:
        return [Slot(i, "", threads) for i in range(parallel)]

    def visible() -> list[str]:
        if gpus is None:
            return visible_gpus()
        if isinstance(gpus, int):
            return [str(i) for i in range(gpus)]
        return [str(g) for g in gpus]

    if devices == "auto":
        available = visible()
        if not available:
            return cpu_slots()
        selected = available
    elif devices == "cpu":
        return cpu_slots()
    elif devices == "cuda":
        selected = visible()
        if not selected:
            raise SpecError(
                "'cuda' asks for the GPUs but none is visible (CUDA_VISIBLE_DEVICES / "
                "nvidia-smi -L); use 'auto' or 'cpu'",
                field=field,
            )
    elif isinstance(devices, int) and not isinstance(devices, bool):
        available = visible()
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
        selected = available[:devices]
    elif isinstance(devices, tuple) and devices and all(_is_index(i) for i in devices):
        available = visible()
        if len(set(devices)) != len(devices):
            raise SpecError(f"lists a GPU twice: {list(devices)!r}", field=field)
        bad = [i for i in devices if i >= len(available)]
        if bad:
            raise SpecError(
                f"GPU index {bad[0]} is not visible: {len(available)} GPU(s) are "
                f"({','.join(available) or 'none'}); got {list(devices)!r}",
                field=field,
            )
        selected = [available[i] for i in devices]
    else:
        # The spec canonicalizes every accepted spelling; anything else is a caller's bug.
        raise SpecError(
            "must be 'auto', 'cpu', 'cuda', a number of GPUs, or a tuple of GPU indexes; "
            f"got {devices!r}",
            field=field,
        )

    per_slot = len(selected) // parallel
    if per_slot < 1:
        raise SpecError(
            f"{_show(devices)} selects {len(selected)} GPU(s) ({','.join(selected)}) but "
            f"trials.parallel={parallel} needs at least one per trial slot",
            field=field,
        )
    if per_slot < nproc_per_node:
        raise SpecError(
            f"{_show(devices)} gives each of the {parallel} slot(s) {per_slot} GPU(s) but "
            f"trials.nproc_per_node={nproc_per_node} needs one per process "
            f"({parallel * nproc_per_node} in all)",
            field=field,
        )
    return [
        Slot(i, ",".join(selected[i * per_slot : (i + 1) * per_slot]), threads)
        for i in range(parallel)
    ]


def _is_index(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _show(devices: Devices) -> str:
    return repr(list(devices)) if isinstance(devices, tuple) else repr(devices)


__all__ = ["Devices", "Slot", "split_devices", "visible_gpus"]
