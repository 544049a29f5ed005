"""Starting one trial: ask Optuna, mark it (config, heartbeat), close an attempt asked past
``study.n_trials``, sample its params and start its :class:`~dvt_hpo.study.trial_run.TrialRun`.
A trial that cannot start is recorded at once (FAIL with the reason, or FAIL for a retry when
the worker is stopped), never left RUNNING until its heartbeat goes stale.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dvt_hpo.budget.ledger import Ledger
from dvt_hpo.budget.trials import OVER_BUDGET_ATTR, RETRY_ATTR
from dvt_hpo.devices.slots import Slot
from dvt_hpo.optuna_api.private import frozen_at_ask, set_trial_user_attrs, trial_id_of
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
            params = space.sample(trial, spec.search_space)
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

    def _over_budget(self, number: int, started: optuna.trial.FrozenTrial) -> bool:
        n_trials = self.handle.spec.study.n_trials
        if n_trials is None:
            return False
        self.ledger.refresh(known=started)  # just read: not read again
        return self.ledger.used(below=number) >= n_trials
