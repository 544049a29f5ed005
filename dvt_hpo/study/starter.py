"""Starting one trial: ask Optuna, mark it (config, heartbeat), close an attempt asked past
``study.n_trials``, sample its params and start its :class:`~dvt_hpo.study.trial_run.TrialRun`.
A trial that cannot start is recorded at once (FAIL with the reason, or FAIL for a retry when
the worker is stopped), never left RUNNING until its heartbeat goes stale.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

from dvt_hpo.budget.ledger import Ledger
from dvt_hpo.budget.trials import OVER_BUDGET_ATTR, RETRY_ATTR
from dvt_hpo.devices.slots import Slot
from dvt_hpo.optuna_api.private import (
    frozen_at_ask,
    set_trial_user_attrs,
    storage_of,
    trial_id_of,
)
from dvt_hpo.recovery import kill_points, resume
from dvt_hpo.recovery import retries as recovery
from dvt_hpo.results.events import TrialStarted
from dvt_hpo.results.outcome import trial_state
from dvt_hpo.sampling import space
from dvt_hpo.stopping.signals import StopSignals
from dvt_hpo.store import trial_config
from dvt_hpo.study import messages as run_messages
from dvt_hpo.study.handle import StudyHandle
from dvt_hpo.study.recorder import tell
from dvt_hpo.study.setup import reseeded_sampler
from dvt_hpo.study.trial_run import TrialRun

if TYPE_CHECKING:
    import optuna

__all__ = ["TrialStarter"]


class TrialStarter:
    """Starts the loop's trials; ``running`` is the loop's map of its running trials, where a
    started one is put before its thread starts."""

    def __init__(
        self,
        handle: StudyHandle,
        ledger: Ledger,
        config_key: str,
        running: dict[int, TrialRun],
        out: Callable[[str], None],
    ) -> None:
        self.handle = handle
        self.ledger = ledger
        self.config_key = config_key
        self.running = running
        self.out = out
        self._reseeded = False

    def launch(self, slot: Slot, signals: StopSignals | None) -> bool:
        """Ask for a trial and start it in ``slot``; False when the study's budget turned out
        to be used up by another worker between our count and our ask."""
        signals = signals or StopSignals()
        with signals.deferred(), self.handle.lock:  # a Ctrl-C here is raised in the try below
            trial = self.handle.db(self.handle.study.ask, "asking for a trial")
        kill_points.reached("ask")
        try:
            signals.check()
            return self._start(trial, slot)
        except KeyboardInterrupt:
            # Stopped before it ran: recorded for a retry, as a running trial would be.
            with contextlib.suppress(Exception), self.handle.lock:
                self.handle.fail_attempt(trial_id_of(trial))
            raise
        except Exception as exc:
            if self._ended_elsewhere(trial, exc):
                return False
            # Nothing runs for this trial: end it with the reason, not RUNNING until stale.
            with contextlib.suppress(Exception), self.handle.lock:
                reason = f"orchestrator error: {type(exc).__name__}: {exc}"
                attrs = {"status": "failed", "reason": reason}
                set_trial_user_attrs(self.handle.storage, trial_id_of(trial), attrs)
                tell(
                    self.handle.study,
                    trial,
                    state=trial_state("FAIL"),
                    skip_if_finished=True,
                )
            raise

    def _ended_elsewhere(self, trial: optuna.Trial, exc: Exception) -> bool:
        """Whether another worker's stale sweep finished ``trial`` before its launch (an
        overloaded machine): that worker recorded it and queued its copy; this one goes on."""
        import optuna

        if not isinstance(exc, optuna.exceptions.UpdateFinishedTrialError):
            return False
        with self.handle.lock:
            trial_id = trial_id_of(trial)
            stored = self.handle.db(
                lambda: self.handle.storage.get_trial(trial_id), "reading a trial"
            )
        retried = RETRY_ATTR in stored.system_attrs
        grace_s = self.handle.spec.study.grace_period_s
        self.out(run_messages.ended_before_start(trial.number, retried=retried, grace_s=grace_s))
        return True

    def _start(self, trial: optuna.Trial, slot: Slot) -> bool:
        spec = self.handle.spec
        with self.handle.lock:
            trial_id = trial_id_of(trial)
            if not self._reseeded:
                # Samplers draw lazily (at the first suggest), so re-seeding now decides this
                # trial's params too. The first trial number a worker gets is unique among all
                # workers of the study (the storage assigns it atomically) and is the same
                # for a lone worker on the same study: distinct streams, reproducible alone.
                self._reseeded = True
                self.handle.study.sampler = reseeded_sampler(self.handle.spec, trial.number)
            self.handle.storage.set_trial_system_attr(
                trial_id, trial_config.TRIAL_ATTR, self.config_key
            )
            # Until its first heartbeat only its start time tells other workers it is alive
            # (dvt_hpo.recovery.stale): record one at once.
            recovery.record_heartbeat(self.handle.storage, trial_id)
            kill_points.reached("start:heartbeat")
            started = frozen_at_ask(trial)  # what the ledger and the retry mark need
            retried = recovery.retried_trial_number(started)
            # A copy stands in its original's place (the first of its chain): over budget
            # when that was, e.g. an attempt asked past the budget whose worker was killed
            # before it could close it.
            if self._over_budget(trial.number if retried is None else retried, started):
                # Storages number trials atomically, so "the first n_trials count" is exact
                # across workers; the extra one is closed at once and never counted.
                self.handle.storage.set_trial_system_attr(trial_id, OVER_BUDGET_ATTR, True)
                reason = "another worker took the last trial of study.n_trials first"
                attrs = {"status": "over-budget", "reason": reason}
                set_trial_user_attrs(self.handle.storage, trial_id, attrs)
                tell(self.handle.study, trial, state=trial_state("FAIL"))
                resume.closed_unrun(spec, self.handle.storage.get_trial(trial_id))
                return False
        with self._beating(trial_id):
            params = self._sample(trial)
        kill_points.reached("start:params")
        config = trial_config.trial_run_config(spec, params, trial.number)
        run = TrialRun(self.handle, trial, params, config, slot)
        attrs = self.handle.observers.trial_started(
            TrialStarted(trial.number, trial_id, params, retried, time.time())
        )
        if retried is not None:
            attrs["retry_of"] = retried
        with self.handle.lock:
            set_trial_user_attrs(self.handle.storage, trial_id, attrs)  # one transaction
        self.running[trial.number] = run
        try:
            run.start()
        except BaseException:
            self.running.pop(trial.number, None)
            raise
        return True

    def _sample(self, trial: optuna.Trial) -> dict[str, Any]:
        """The trial's params, sampled without holding the study lock for the whole call.

        The sampler fits its model at the first suggest (mf_gp: seconds, tens of seconds on a
        big study or a loaded machine). Under the lock, that stopped the heartbeat thread
        (:class:`~dvt_hpo.study.sweeper.Sweeper`) and every trial of this worker went without a
        heartbeat meanwhile, to be failed as stale by the other workers. The lock still
        serialises each storage call the sampling makes (reading the trials, writing a param):
        the trial writes and its sampler reads through a view of the study whose storage takes
        the lock around each call, and the fit in between runs with the lock free.
        """
        import optuna

        study = self.handle.study
        with self.handle.lock:
            storage = cast(
                "optuna.storages.BaseStorage", _Locked(storage_of(study), self.handle.lock)
            )
            # A fresh Study object, as study.ask leaves the asking one: no trial list cached.
            view = optuna.Study(
                study.study_name, storage, sampler=study.sampler, pruner=study.pruner
            )
        asked_study, asked_storage = trial.study, trial.storage
        trial.study, trial.storage = view, storage
        try:
            return space.sample(trial, self.handle.spec.search_space)
        finally:
            trial.study, trial.storage = asked_study, asked_storage

    @contextlib.contextmanager
    def _beating(self, trial_id: int) -> Iterator[None]:
        """Heartbeats of a trial while its params are sampled. The heartbeat thread beats only
        the trials in ``running``, which a trial joins once it starts, and the heartbeat
        recorded at its ask ages meanwhile: a fit longer than ``study.grace_period_s`` had
        another worker fail it as stale before it ran."""
        stop = threading.Event()
        interval_s = self.handle.spec.study.heartbeat_interval_s

        def beat() -> None:
            while not stop.wait(interval_s):
                # A missed beat is retried at the next interval, as the heartbeat thread does.
                with contextlib.suppress(Exception), self.handle.lock:
                    recovery.record_heartbeat(self.handle.storage, trial_id)

        thread = threading.Thread(target=beat, name="heartbeat-sampling", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def _over_budget(self, number: int, started: optuna.trial.FrozenTrial) -> bool:
        n_trials = self.handle.spec.study.n_trials
        if n_trials is None:
            return False
        self.ledger.refresh(known=started)  # just read: not read again
        return self.ledger.used(below=number) >= n_trials


class _Locked:
    """A storage whose every call takes ``lock``: what the sampling reads and writes through,
    so that each call is serialised with the worker's other threads' (Optuna's storage objects
    and a SQLite connection are shared by them) while the computing between calls is not."""

    def __init__(self, storage: Any, lock: threading.RLock) -> None:
        self._storage = storage
        self._lock = lock

    def __getattr__(self, name: str) -> Any:
        if name in ("_storage", "_lock"):  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        found = getattr(self._storage, name)
        if not callable(found):
            return found

        @functools.wraps(found)
        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return found(*args, **kwargs)

        return locked
