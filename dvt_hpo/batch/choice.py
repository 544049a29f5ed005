"""A trial's batch-size decision: the study cache, the search, the ranks' agreement, accumulation.

:func:`choose_batch_size` is what ``ctx.find_batch_size`` runs (the context passes its settings,
its cache channel and its user attrs): a cached size gets one verifying probe, else
:func:`dvt_hpo.batch.search.find_batch_size` searches; ``agree`` makes the ranks' answers one;
``batch_size.effective`` splits it into steps and accumulation (:func:`effective_split`). It
returns the :class:`BatchSizeChoice` the trial records. Trial side, torch-free: ``fits`` holds
the trainer's steps.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from dvt_hpo.batch.cache import cache_entry_key, usable_size
from dvt_hpo.batch.search import Probe, ProbeRecord, SearchResult, find_batch_size
from dvt_hpo.batch.spec import BatchSizeSpec
from dvt_hpo.config.schema import from_wire_mapping
from dvt_hpo.exceptions import BatchSizeError

CacheStatus = Literal["hit", "miss", "stale", "off"]


@dataclass(frozen=True)
class BatchSizeChoice:
    """What :meth:`TrialContext.find_batch_size` decided."""

    batch_size: int  # per step (and per process under DDP)
    accumulate_steps: int  # 1 unless batch_size.effective is set
    found: int  # the size the search (or the verified cache) found, after agreement
    probes: int  # calls of fits
    probe_s: float  # wall time of the whole decision, probes included
    cache: CacheStatus
    probe_sizes: tuple[int, ...]  # the sizes probed, in order
    records: tuple[ProbeRecord, ...] = ()
    # The training samples per process when they capped the search below batch_size.max and
    # the search reached that cap (memory did not stop it first): a batch larger than the data
    # holds is never filled, however much memory there is.
    data_cap: int | None = None

    def user_attrs(self) -> dict[str, Any]:
        """The Optuna user attrs a trial records for its batch size."""
        attrs: dict[str, Any] = {
            "batch_size": self.batch_size,
            "batch_size_found": self.found,
            "accumulate_steps": self.accumulate_steps,
            "batch_size_probes": self.probes,
            "batch_size_probe_s": round(self.probe_s, 3),
            "batch_size_cache": self.cache,
            "batch_size_probe_sizes": list(self.probe_sizes),
        }
        if self.data_cap is not None:
            attrs["batch_size_data_cap"] = self.data_cap
        return attrs

    def cap_note(self) -> str | None:
        """What a trial says when the training set capped the search."""
        if self.data_cap is None:
            return None
        return (
            f"batch size search capped at {self.data_cap}, the training samples per process "
            "(a larger batch is never filled)"
        )


@dataclass(frozen=True)
class CacheChannel:
    """The study cache as the trial process reaches it (over its control socket)."""

    get: Callable[[str], dict[str, Any] | None]
    put: Callable[[str, dict[str, Any]], None]
    key: str  # the payload's cache_key


def effective_split(found: int, effective: int | None) -> tuple[int, int]:
    """``(batch_size, accumulate_steps)`` reaching ``effective`` samples per optimizer step
    with steps of at most ``found`` samples; ``(found, 1)`` without ``effective``."""
    if effective is None:
        return found, 1
    accumulate = math.ceil(effective / found)
    return math.ceil(effective / accumulate), accumulate


def grid_top(settings: BatchSizeSpec) -> int:
    """The largest size the search tries: ``max`` rounded down to ``multiple_of`` (``max``
    when no multiple lies in ``[min, max]``)."""
    top = settings.max - settings.max % settings.multiple_of
    return top if top >= settings.min else settings.max


def settings_from_mapping(data: Mapping[str, Any]) -> BatchSizeSpec:
    """A ``batch_size`` section given as a plain mapping (by hand, outside a study): its keys
    and types are checked here; the search checks its bounds when it runs."""
    spec: BatchSizeSpec = from_wire_mapping(BatchSizeSpec, data, "batch_size", TypeError)
    return spec


def choose_batch_size(
    fits: Callable[[int], bool | Probe],
    settings: BatchSizeSpec,
    *,
    device: str,
    agree: Callable[[int], int] | None,
    samples: int | None,
    cache: CacheChannel | None,
    chief: bool,
    trial_number: int | None,
    set_attrs: Callable[[dict[str, Any]], None],
) -> BatchSizeChoice:
    """The batch size of a trial whose ``settings.auto`` is on (see
    :meth:`dvt_hpo.trial.context.TrialContext.find_batch_size` for ``fits``, ``agree``,
    ``device`` and ``samples``). Without ``cache`` the search runs every time (``"off"``);
    ``chief`` stores the agreed size and says when the data capped the search. A search that
    finds nothing records what it probed through ``set_attrs`` and raises
    :class:`~dvt_hpo.exceptions.BatchSizeError`."""
    cap: int | None = None
    if samples is not None and samples < settings.max:
        cap = max(1, int(samples))
        # The search's bounds under the cap (min itself when the data is smaller).
        settings = replace(
            settings,
            max=cap,
            min=min(settings.min, cap),
            start=None if settings.start is None else min(settings.start, cap),
        )
    began = time.perf_counter()
    records: list[ProbeRecord] = []
    cached: int | None = None
    key: str | None = None
    status: CacheStatus = "off"
    if cache is not None:
        key = cache_entry_key(cache.key, device, cap)
        cached = usable_size(cache.get(key), settings)
        status = "miss"
    local: int | None = None
    if cached is not None:
        try:
            check = find_batch_size(
                fits, low=cached, high=cached, start=cached, multiple_of=1, tolerance=0.0
            )
        except BatchSizeError as exc:
            records.extend(getattr(exc, "probes", ()))
            status = "stale"
        else:
            records.extend(check.probes)
            status = "hit"
            local = cached
    if local is None:
        try:
            result: SearchResult = find_batch_size(
                fits,
                low=settings.min,
                high=settings.max,
                start=settings.start,
                multiple_of=settings.multiple_of,
                tolerance=settings.tolerance,
            )
        except BatchSizeError as exc:
            # A failed trial shows what was tried, to tell "min too big" from a bad fits.
            records.extend(getattr(exc, "probes", ()))
            set_attrs(
                {
                    "batch_size_probes": len(records),
                    "batch_size_probe_sizes": [r.size for r in records],
                    "batch_size_probe_s": round(time.perf_counter() - began, 3),
                }
            )
            raise
        records.extend(result.probes)
        local = result.size
    found = local
    if agree is not None:
        found = agree(local)
        if isinstance(found, bool) or not isinstance(found, int) or found < 1:
            raise TypeError(f"agree({local}) must return an int >= 1, got {found!r}")
    if cache is not None and key is not None and chief and (status != "hit" or found != cached):
        cache.put(key, {"batch_size": found, "device": device, "trial_number": trial_number})
    batch_size, accumulate = effective_split(found, settings.effective)
    choice = BatchSizeChoice(
        batch_size=batch_size,
        accumulate_steps=accumulate,
        found=found,
        probes=len(records),
        probe_s=time.perf_counter() - began,
        cache=status,
        probe_sizes=tuple(r.size for r in records),
        records=tuple(records),
        data_cap=cap if cap is not None and found >= grid_top(settings) else None,
    )
    if (note := choice.cap_note()) is not None and chief:
        print(f"dvt-hpo: {note}", file=sys.stderr, flush=True)
    return choice


__all__ = [
    "BatchSizeChoice",
    "CacheChannel",
    "CacheStatus",
    "choose_batch_size",
    "effective_split",
    "grid_top",
    "settings_from_mapping",
]
