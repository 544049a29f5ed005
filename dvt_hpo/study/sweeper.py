"""A worker's duties to the workers it shares the study with, in one background thread: the
heartbeat of each of its running trials, and the sweep of the others' (a dead worker's stale
trial failed for a retry, a finished trial its worker could not record recorded; see
:mod:`dvt_hpo.recovery`).

Once ``study.budget`` is spent, it also closes the retry copies no worker will run.

A heartbeat is tried once per interval, not retried, but a failure to reach the database still
counts as an outage (:meth:`dvt_hpo.store.errors.OutageRetry.once`): after one, no trial is
judged stale until the grace period has passed, and the time a live worker's heartbeat takes to
land again, since no worker's heartbeat could land meanwhile.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from dvt_hpo.recovery import finished, leftovers, resume
from dvt_hpo.recovery import retries as recovery
from dvt_hpo.results.outcome import trial_state
from dvt_hpo.store.errors import MAX_BACKOFF_S

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec.model import StudySpec
    from dvt_hpo.store.errors import OutageRetry

__all__ = ["Sweeper"]


class _Running(Protocol):
    trial_id: int


@dataclass
class Sweeper:
    """The sweep (:meth:`sweep`, also called by the loop) and the thread that beats and sweeps
    every ``study.heartbeat_interval_s`` until ``stop`` is set."""

    spec: StudySpec
    study: optuna.Study
    storage: Any
    study_lock: threading.RLock
    retry_lock: Callable[[], contextlib.AbstractContextManager[Any]]
    db: OutageRetry
    running: Mapping[int, _Running]  # this worker's trials by number: never judged stale here
    stop: threading.Event = field(default_factory=threading.Event)

    def sweep(self) -> None:
        section = self.spec.study
        # After an outage a live worker's calls resume within one backoff pause of the
        # database's return (its heartbeat thread may wait on the study lock as long, held by
        # a call retrying), and its heartbeat lands within one interval more: until then its
        # trials look stale. Judged sooner, a trial that kept running was failed and its copy
        # started beside it (seen under load with a 3 s grace).
        settling_s = section.grace_period_s + MAX_BACKOFF_S + section.heartbeat_interval_s
        with self.study_lock:
            recovery.reconcile(
                self.study,
                self.storage,
                grace_period_s=section.grace_period_s,
                max_retries=self.spec.trials.max_retries,
                is_ours=self.running.__contains__,
                lock=self.retry_lock,
                on_failed=resume.sweep_hook(self.spec),
                finished=finished.sweep_hook(self.spec, self.retry_lock),
                judge_stale=not self.db.met_outage_within(settling_s),
            )

    def close_leftovers(self, why: str) -> list[int]:
        """Once ``study.budget`` is spent (``why``), the retry copies no worker will run,
        closed as over budget (:func:`dvt_hpo.recovery.leftovers.close_when_spent`)."""
        return leftovers.close_when_spent(
            why,
            self.study,
            self.storage,
            self.spec,
            sweep=self.sweep,
            study_lock=lambda: self.study_lock,
            retry_lock=self.retry_lock,
        )

    def foreign_running(self) -> tuple[list[int], dict[int, float]]:
        """The RUNNING trials of other (or dead) workers, by number, and the age of each one's
        heartbeat (what the loop waits on before it retries them or leaves)."""
        with self.study_lock:
            foreign = [
                t
                for t in self.study.get_trials(deepcopy=False, states=(trial_state("RUNNING"),))
                if t.number not in self.running
            ]
            ages = recovery.heartbeat_ages(self.storage, foreign)
        return [t.number for t in foreign], ages

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
        thread.start()
        return thread

    def _beat(self) -> None:
        interval_s = self.spec.study.heartbeat_interval_s
        while not self.stop.wait(interval_s):
            for run in list(self.running.values()):
                with contextlib.suppress(Exception), self.study_lock:
                    self.db.once(partial(recovery.record_heartbeat, self.storage, run.trial_id))
            with contextlib.suppress(Exception):
                self.db.once(self.sweep)
