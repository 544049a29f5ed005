"""What an entry point ``run(config, ctx)`` gets as ``ctx``: reporting, user attrs, batch size.

:class:`TrialContext` talks to the orchestrator over the control channel (inside a study);
:class:`LocalContext` runs the same entry point outside one (``dvt-hpo train``): it prints the
reports and runs the batch-size search without the study's cache. Neither imports torch. The
batch-size decision itself is :func:`dvt_hpo.batch.choice.choose_batch_size`; the contexts give
it their settings, cache channel and user attrs.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from dvt_hpo.batch.choice import (
    BatchSizeChoice,
    CacheChannel,
    choose_batch_size,
    settings_from_mapping,
)
from dvt_hpo.batch.search import Probe
from dvt_hpo.exceptions import TrialPruned, TrialStopped
from dvt_hpo.report import check_report
from dvt_hpo.trial.resume_state import ResumeAPI
from dvt_hpo.wire.control_client import ControlClient

if TYPE_CHECKING:
    from dvt_hpo.batch.spec import BatchSizeSpec


# The stop signal this trial process received (the trial process's SIGTERM handler sets it), so that a
# TrialStopped that Python dropped is raised again at the next report: a handler that runs in a
# weakref callback or a ``__del__`` (tqdm's, a DataLoader iterator's) has its exception printed
# as "Exception ignored" and lost, and later SIGTERMs are ignored while the stop is handled.
_stop_received: str | None = None


def note_stop(signal_name: str) -> None:
    """Remember that the trial was told to stop (see :func:`raise_if_stopped`)."""
    global _stop_received
    _stop_received = signal_name


def raise_if_stopped() -> None:
    """Raise :class:`TrialStopped` when the trial was told to stop (on the main thread only:
    a report from another thread, a command trainer's reporter, must not end that thread)."""
    if _stop_received is not None and threading.current_thread() is threading.main_thread():
        raise TrialStopped(_stop_received)


def distributed_env(env: Mapping[str, str] | None = None) -> tuple[int, int, int]:
    """``(rank, local_rank, world_size)`` from torchrun's variables; ``(0, 0, 1)`` without."""
    env = os.environ if env is None else env

    def read(name: str, default: int) -> int:
        value = env.get(name)
        if value is None or value == "":
            return default
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"${name} must be an int, got {value!r}") from None

    return read("RANK", 0), read("LOCAL_RANK", 0), read("WORLD_SIZE", 1)


def _format_value(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.6g}"


class _BaseContext(ResumeAPI):
    """What both contexts share; subclasses supply the four channel operations (the resume
    state API comes from :class:`~dvt_hpo.trial.resume_state.ResumeAPI`)."""

    def __init__(
        self,
        *,
        trial_number: int | None,
        params: Mapping[str, Any] | None,
        rank: int,
        local_rank: int,
        world_size: int,
        trial_dir: str | os.PathLike[str] | None,
        batch_size: BatchSizeSpec | None,
        cache_key: str | None = None,
    ) -> None:
        self.trial_number = trial_number
        self.cache_key = cache_key
        self.params: dict[str, Any] = dict(params or {})
        self.rank = rank
        self.local_rank = local_rank
        self.world_size = world_size
        self.trial_dir = Path(trial_dir) if trial_dir is not None else None
        self.batch_size_settings = batch_size
        self.history: list[tuple[int, dict[str, float]]] = []
        self._reported_steps: set[int] = set()
        self.user_attrs: dict[str, Any] = {}
        self.pruned_step: int | None = None
        self.batch_size_choice: BatchSizeChoice | None = None

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    # -- channel (subclasses) -------------------------------------------------------------
    def _send_report(self, step: int, metrics: dict[str, float]) -> bool:
        raise NotImplementedError

    def _send_attrs(self, attrs: dict[str, Any]) -> None:
        raise NotImplementedError

    def _cache_get(self, key: str) -> dict[str, Any] | None:
        return None

    def _cache_put(self, key: str, value: dict[str, Any]) -> None:
        return None

    def _cache_enabled(self) -> bool:
        return False

    # -- API --------------------------------------------------------------------------------
    def report(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Report the metrics of ``step`` (an epoch). On the chief, raises
        :class:`~dvt_hpo.exceptions.TrialPruned` when the study prunes the trial; a no-op on
        the other ranks (their arguments are still checked, so a bug shows on every rank).

        Each step is reported once: a second report of the same step raises ``ValueError``
        (Optuna keeps only the first value of a step, so the second would be silently lost
        to pruning while the objective used it; report all metrics of a step in one call)."""
        raise_if_stopped()
        clean = check_report(step, metrics)
        if step in self._reported_steps:
            raise ValueError(
                f"step {step} was already reported; report each step once, with all its "
                "metrics in one call"
            )
        self._reported_steps.add(step)
        self.history.append((step, clean))
        if not self.is_chief:
            return
        if self._send_report(step, clean):
            self.pruned_step = step
            raise TrialPruned(step)

    def set_user_attr(self, key: str, value: Any) -> None:
        """Store ``value`` (JSON) as the trial's Optuna user attr ``key`` (chief only)."""
        self.set_user_attrs({key: value})

    def set_user_attrs(self, attrs: Mapping[str, Any]) -> None:
        """Several user attrs in one message (chief only)."""
        clean: dict[str, Any] = {}
        for key, value in attrs.items():
            if not isinstance(key, str) or not key:
                raise TypeError(f"a user attr name must be a non-empty string, got {key!r}")
            try:
                clean[key] = json.loads(json.dumps(value))
            except (TypeError, ValueError) as exc:
                raise TypeError(
                    f"user attr {key!r} must be JSON (dict, list, str, number, bool, None), "
                    f"got {type(value).__name__}: {exc}"
                ) from None
        self.user_attrs.update(clean)
        if self.is_chief and clean:
            self._send_attrs(clean)

    def find_batch_size(
        self,
        fits: Callable[[int], bool | Probe],
        *,
        device: str = "cpu",
        agree: Callable[[int], int] | None = None,
        samples: int | None = None,
    ) -> BatchSizeChoice | None:
        """Find the batch size for this trial; ``None`` when ``batch_size.auto`` is off.

        ``fits(n)`` runs real steps at batch size ``n`` without collectives (under DDP, probe
        the bare module, not the DDP wrapper): ranks may probe different sizes. ``agree(n)``
        is then called exactly once on every rank, whatever happened before (cache hit, stale
        entry or fresh search), e.g. an all-reduce MIN, so the ranks' collective calls always
        match. With the study cache (inside a study, when the payload has a ``cache_key``):
        a cached size gets one verifying probe; if it no longer fits, a fresh search runs
        (``cache="stale"``); the chief stores the agreed size. ``device`` names the device
        model and memory and is part of the cache key. ``samples``: the training samples each
        process sees (under DDP the sampler's share); the search never goes past it, says so
        when that caps it below ``batch_size.max``, and keys the cache by the cap.
        """
        settings = self.batch_size_settings
        if settings is None or not settings.auto:
            return None
        cache = None
        if self._cache_enabled() and self.cache_key:
            cache = CacheChannel(self._cache_get, self._cache_put, self.cache_key)
        choice = choose_batch_size(
            fits,
            settings,
            device=device,
            agree=agree,
            samples=samples,
            cache=cache,
            chief=self.is_chief,
            trial_number=self.trial_number,
            set_attrs=self.set_user_attrs,
        )
        self.batch_size_choice = choice
        self.set_user_attrs(choice.user_attrs())
        return choice


class TrialContext(_BaseContext):
    """The context of a trial inside a study, connected to the orchestrator.

    See docs/protocol.md for the members. Built by the trial process from the payload.
    """

    def __init__(
        self,
        client: ControlClient,
        *,
        trial_number: int | None = None,
        params: Mapping[str, Any] | None = None,
        rank: int = 0,
        local_rank: int = 0,
        world_size: int = 1,
        trial_dir: str | os.PathLike[str] | None = None,
        batch_size: BatchSizeSpec | None = None,
        cache_key: str | None = None,
        report_timeout_s: float | None = 60.0,
        study_name: str | None = None,
        warn: TextIO | None = None,
    ) -> None:
        super().__init__(
            trial_number=trial_number,
            params=params,
            rank=rank,
            local_rank=local_rank,
            world_size=world_size,
            trial_dir=trial_dir,
            batch_size=batch_size,
            cache_key=cache_key,
        )
        self.client = client
        self.report_timeout_s = report_timeout_s
        self.study_name = study_name
        self._warn = warn

    def _send_report(self, step: int, metrics: dict[str, float]) -> bool:
        prune = self.client.report(step, metrics, self.report_timeout_s)
        if prune is None:
            # Pruning is an optimisation: a slow orchestrator must not stall training.
            out = self._warn or sys.stderr
            print(
                f"dvt-hpo: no pruning decision for step {step} within "
                f"trials.report_timeout_s={self.report_timeout_s} s; training goes on",
                file=out,
                flush=True,
            )
            return False
        return prune

    def _send_attrs(self, attrs: dict[str, Any]) -> None:
        self.client.set_attrs(attrs)

    def _cache_enabled(self) -> bool:
        return True

    def _cache_get(self, key: str) -> dict[str, Any] | None:
        return self.client.cache_get(key, self.report_timeout_s)

    def _cache_put(self, key: str, value: dict[str, Any]) -> None:
        self.client.cache_put(key, value)


class LocalContext(_BaseContext):
    """The context outside a study (``dvt-hpo train``, or a payload run by hand).

    ``report`` prints one line per step (chief only) and never prunes; ``find_batch_size``
    searches without a cache when ``batch_size`` settings with ``auto`` are given;
    ``set_user_attr`` stores in :attr:`user_attrs`.
    """

    def __init__(
        self,
        *,
        batch_size: BatchSizeSpec | Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        trial_dir: str | os.PathLike[str] | None = None,
        trial_number: int | None = None,
        out: TextIO | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        rank, local_rank, world_size = distributed_env(env)
        if isinstance(batch_size, Mapping):
            batch_size = settings_from_mapping(batch_size)
        super().__init__(
            trial_number=trial_number,
            params=params,
            rank=rank,
            local_rank=local_rank,
            world_size=world_size,
            trial_dir=trial_dir,
            batch_size=batch_size,
        )
        self._out = out

    def _send_report(self, step: int, metrics: dict[str, float]) -> bool:
        values = " ".join(f"{k}={_format_value(v)}" for k, v in metrics.items())
        print(f"epoch {step}: {values}", file=self._out or sys.stdout, flush=True)
        return False

    def _send_attrs(self, attrs: dict[str, Any]) -> None:
        return None  # kept in self.user_attrs by the caller


__all__ = [
    "LocalContext",
    "TrialContext",
    "distributed_env",
    "note_stop",
    "raise_if_stopped",
]
