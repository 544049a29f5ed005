"""The study loop: ask -> launch -> tell, the stopping rules, the observers.

The CLI builds a :class:`~dvt_hpo.spec.model.StudySpec`; :class:`StudyRunner` supervises; each
:class:`~dvt_hpo.study.trial_run.TrialRun` owns one trial's process group and control socket. The
orchestrator never imports torch: trials run in their own processes.

The loop composes and the layers answer: whether to launch is one policy
(:mod:`dvt_hpo.study.launch_policy`: ``study.timeout_s``, the caller's gate, the budget's
decision), opening the study is :mod:`dvt_hpo.study.setup`, its observers
:mod:`dvt_hpo.study.observers`, starting a trial :mod:`dvt_hpo.study.starter`, the other
workers' trials :mod:`dvt_hpo.study.sweeper`, stopping rules :mod:`dvt_hpo.stopping.rules`,
printed wording :mod:`dvt_hpo.study.messages`, the count of ``study.n_trials`` the ledger of
:mod:`dvt_hpo.budget.ledger`. This module stays one class because every method left shares
the run's state: the study lock, the running trials, the ledger and the event queue.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dvt_hpo.batch.cache import StudyCache
from dvt_hpo.budget import compute as compute_budget
from dvt_hpo.budget.ledger import Budget, Ledger
from dvt_hpo.budget.trials import PRIOR_ATTR
from dvt_hpo.devices import slots as device_slots
from dvt_hpo.exceptions import DvtHpoError, StudyStopped
from dvt_hpo.process.import_path import child_pythonpath
from dvt_hpo.recovery import leftovers, stopped_nodes
from dvt_hpo.recovery import retries as recovery
from dvt_hpo.results.events import StudyObserver
from dvt_hpo.results.outcome import TrialOutcome, trial_state
from dvt_hpo.stopping import plateau
from dvt_hpo.stopping import rules as stop_rules
from dvt_hpo.stopping.signals import StopSignals
from dvt_hpo.store import lock as storage_lock
from dvt_hpo.store import trial_config
from dvt_hpo.store.errors import OutageRetry
from dvt_hpo.study import messages as run_messages
from dvt_hpo.study.handle import StudyHandle
from dvt_hpo.study.launch_policy import LaunchPolicy
from dvt_hpo.study.observers import (
    ObserverFactory,
    Observers,
    ended_event,
    for_run,
    started_event,
)
from dvt_hpo.study.pausing import PauseKeeper
from dvt_hpo.study.setup import launcher_for, open_checked
from dvt_hpo.study.starter import TrialStarter
from dvt_hpo.study.sweeper import Sweeper
from dvt_hpo.study.trial_run import TrialRun
from dvt_hpo.text.redact import redact_url

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec.model import StudySpec

# Exit code of a run stopped by Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130
_log = logging.getLogger(__name__)


class StudyRunner:
    """Runs a study described by a :class:`StudySpec` until its budget or a stopping rule."""

    def __init__(
        self,
        spec: StudySpec,
        *,
        allow_space_change: bool = False,
        retry_failed: bool = False,
        out: Callable[[str], None] | None = None,
        observers: Sequence[StudyObserver] = (),
        launch_gate: Callable[[optuna.Study], str | None] | None = None,
        observer_factory: ObserverFactory | None = None,
    ) -> None:
        self.spec = spec
        self.allow_space_change = allow_space_change
        # Without an ``out`` (the CLI), the progress observer prints: a live view on a
        # terminal, plain lines elsewhere; with one (notebooks, tests), plain lines go to it.
        self._progress_view = out is None
        self.retry_failed = retry_failed
        self.out = out or (lambda line: print(line, flush=True))
        self._extra_observers = list(observers)
        self._observer_factory = observer_factory
        self.observers = Observers(self._extra_observers, self.out)
        # None while new trials may start, else why not (a Slurm job's time limit near): the
        # caller's gate (dvt_hpo.run.runner passes the Slurm job's), none without one.
        self.launch_gate = launch_gate
        self._prints_trial_lines = True
        self.study_lock = threading.RLock()
        # Storage calls retried through database outages, each outage said once.
        self.db = OutageRetry(
            spec.study.storage, spec.study.storage_retry_s, out=lambda line: self.out(line)
        )
        self.events: queue.Queue[TrialOutcome] = queue.Queue()
        self.running: dict[int, TrialRun] = {}
        self.child_env = {
            **os.environ,
            "PYTHONPATH": child_pythonpath(spec.path.parent),
            "PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED", "1"),
        }
        self.launcher = launcher_for(spec, self.child_env, out=lambda line: self.out(line))
        self.study: optuna.Study
        self.storage: Any
        self.cache: StudyCache
        self.ledger: Ledger
        self.outcomes: list[TrialOutcome] = []
        self.config_key = ""
        self._plateau: plateau.PlateauWatch | None = None  # study.plateau, from the loop's start
        self.pausing: PauseKeeper | None = None  # trials.pause
        self.stop_signals: StopSignals | None = None  # while the loop runs
        # Set when this worker is told to stop (Ctrl-C, SIGTERM): its trials' threads read it.
        self.worker_stopped = threading.Event()

    def open_study(self) -> optuna.Study:
        opened = open_checked(self.spec, allow_space_change=self.allow_space_change, out=self.out)
        self.study, self.storage, self.study_id = opened.study, opened.storage, opened.study_id
        self.cache = StudyCache(self.storage, self.study_id, self.study_lock)
        self.handle = StudyHandle(
            spec=self.spec,
            study=self.study,
            storage=self.storage,
            lock=self.study_lock,
            db=self.db,
            cache=self.cache,
            observers=self.observers,
            launcher=self.launcher,
            child_env=self.child_env,
            finished=self.events.put,
            fail_attempt=self.fail_attempt,
            worker_stopped=self.worker_stopped,
            # study.budget: its decisions gate launches and stop strict ones (LaunchPolicy)
            budget=compute_budget.watch(
                self.spec, self.storage, self.study_id, study_lock=self.study_lock, db=self.db
            ),
            out=self.out,
        )
        self.ledger = Ledger(
            self.study, self.storage, self.study_id, max_retries=self.spec.trials.max_retries
        )
        self.config_key = trial_config.store_base(self.storage, self.study_id, self.spec)
        self.sweeper = Sweeper(
            self.spec,
            self.study,
            self.storage,
            self.study_lock,
            self.retry_lock,
            self.db,
            self.running,
        )
        self.pausing = PauseKeeper.of(self.handle, self.retry_lock, lambda line: self.out(line))
        self.sweeper.sweep()
        if self.retry_failed:
            numbers = recovery.retry_failed(self.study, lock=self.retry_lock)
            self.out(run_messages.retry_failed_line(numbers))
        return self.study

    # -- budget and recovery ------------------------------------------------------------
    def retry_lock(self) -> contextlib.AbstractContextManager[None]:
        """The study's lock around enqueuing retries (one copy per failed attempt)."""
        return storage_lock.retry_lock(self.spec.study.storage, self.study_id)

    def fail_attempt(self, trial_id: int) -> bool:
        """Record one of our attempts FAIL and have its copy enqueued (see recovery)."""
        return recovery.fail_attempt(
            self.study,
            self.storage,
            trial_id,
            retry=True,
            max_retries=self.spec.trials.max_retries,
            lock=self.retry_lock,
        )

    def _close_leftovers(self) -> None:
        """Once ``study.budget`` is spent, no retry copy is left WAITING (docs/budgets.md)."""
        why = self.handle.budget.exhausted() if self.handle.budget is not None else None
        if why is not None and (closed := self.sweeper.close_leftovers(why)):
            self.out(leftovers.closed_line(why, closed))

    def budget(self) -> Budget:
        with self.study_lock:
            self.db(self.ledger.refresh, "counting the budget")
            return self.ledger.budget(self.running.__contains__)

    # -- the loop -----------------------------------------------------------------------
    def run(self) -> optuna.Study:
        try:
            return self._run()
        except (DvtHpoError, KeyboardInterrupt):
            raise
        except Exception as exc:
            # A bug or a lost database in the orchestrator's own bookkeeping ends the run with
            # one line; its running trials are stopped and recorded for a retry first.
            _log.debug("orchestrator error", exc_info=True)
            raise StudyStopped(f"orchestrator error: {type(exc).__name__}: {exc}") from exc

    def _run(self) -> optuna.Study:
        spec = self.spec
        self.open_study()
        self._build_observers()
        n_trials = spec.study.n_trials
        budget = self.budget()
        where = redact_url(spec.study.storage)
        self.observers.study_started(started_event(spec, where, self._n_done()))
        exit_code = 1
        try:
            if budget.nothing_left(n_trials):
                self.out(run_messages.nothing_to_run_line(spec, where, budget.used))
                self.print_summary()
                exit_code = 0
                return self.study
            slots = device_slots.split_devices(
                spec.trials.devices,
                spec.trials.parallel,
                nproc_per_node=spec.trials.nproc_per_node,
                per_gpu=spec.trials.per_gpu,
            )
            self.out(run_messages.start_line(spec, where, self._n_done(), slots))
            for note in self.launcher.notes:
                self.out(note)
            self.out(run_messages.dashboard_hint(spec.path, spec.overrides))
            stop_message = self._loop(slots)
            self._close_leftovers()
            if self.pausing and stop_message is None and not self.worker_stopped.is_set():
                self.pausing.study_over(self.budget(), plateau=self._plateau)
            self.print_summary()
            if stop_message is None:
                stop_message = stop_rules.nothing_succeeded(self.outcomes)
            if stop_message is not None:
                raise StudyStopped(stop_message)
            exit_code = 0
            return self.study
        except KeyboardInterrupt:
            exit_code = EXIT_INTERRUPTED
            raise
        except Exception as exc:
            if not isinstance(exc, DvtHpoError):
                with contextlib.suppress(Exception):
                    self._stop_running(f"orchestrator error ({type(exc).__name__})")
            raise
        finally:
            self.launcher.close()
            self._study_ended(exit_code)

    def _loop(self, slots: Sequence[device_slots.Slot]) -> str | None:
        spec = self.spec
        n_trials = spec.study.n_trials
        free_slots = list(slots)
        self.sweeper.start()
        policy = LaunchPolicy(
            timeout_s=spec.study.timeout_s,
            gate=self.launch_gate,
            budget=self.handle.budget,
            running=self.running,
            heartbeat_interval_s=spec.study.heartbeat_interval_s,
            ended=self.sweeper.stop,
            out=lambda line: self.out(line),
        )
        stop_message: str | None = None
        starter = TrialStarter(
            self.handle, self.ledger, self.config_key, self.running, lambda line: self.out(line)
        )
        if spec.study.plateau is not None:
            with self.study_lock:
                done = self.study.get_trials(deepcopy=False)
            self._plateau = plateau.PlateauWatch.for_study(spec, done)
        node_watch = stopped_nodes.NodeWatch(spec.trials.node_failures, self.handle)
        stop_signals = self.stop_signals = StopSignals(self.worker_stopped).install()
        try:
            while True:
                policy.check(self.study, bool(free_slots))
                foreign = 0
                while policy.launching and free_slots:
                    budget = self.budget()
                    if self.pausing and not budget.waiting and self.pausing.continue_one():
                        budget = self.budget()  # the continuation is the next trial asked
                    # A failed attempt whose copy is not enqueued yet (its worker died on the
                    # way) is waited on like a foreign trial: the sweep enqueues it.
                    foreign = budget.foreign_running + budget.pending
                    if budget.all_asked(n_trials):
                        break
                    slot = free_slots.pop(0)
                    if not starter.launch(slot, self.stop_signals):
                        free_slots.append(slot)
                if not self.running and not (policy.launching and foreign):
                    # Trials of a dead orchestrator stay RUNNING until their heartbeat goes
                    # stale; waiting for them lets this worker retry them instead of leaving.
                    break
                only_foreign = bool(foreign) and not self.running
                if policy.launching and only_foreign:
                    numbers, ages = self.sweeper.foreign_running()
                    policy.awaiting(numbers, ages, grace_period_s=spec.study.grace_period_s)
                outcome = stop_signals.get(self.events, policy.wait_s(only_foreign=only_foreign))
                if outcome is None:
                    continue
                run = self.running.pop(outcome.number)
                free_slots.append(run.slot)
                if outcome.told is not None:
                    with self.study_lock:
                        self.ledger.told(outcome.told)
                self._record(outcome)
                if outcome.paused and self.pausing is not None:
                    self.pausing.after_pause()
                if (broken := node_watch.finished(self.outcomes)) is not None:
                    policy.stop()
                    stop_message = broken  # exit 1; its trials are retried
                    self._stop_running("this node looks broken")
                    continue
                if policy.launching and self._plateau_reached(outcome):
                    # Not an error: the run ends with exit 0 once its running trials finish.
                    policy.stop()
                if outcome.state == "FAIL" and not outcome.interrupted and policy.launching:
                    stop_message = stop_rules.stop_message(
                        self.outcomes, spec.study.max_failures, n_trials
                    )
                    if stop_message is not None:
                        # The message itself is printed once, as the run's error, at the end.
                        policy.stop()
                        if self.running:
                            self.out(
                                "no new trials (a stopping rule was reached); waiting for "
                                f"{len(self.running)} running trial(s)"
                            )
        except KeyboardInterrupt:
            self._stop_running("interrupted")
            raise
        finally:
            stop_signals.restore()
            self.sweeper.stop.set()
        return stop_message

    def _plateau_reached(self, outcome: TrialOutcome) -> bool:
        """Whether ``study.plateau`` stops launching after ``outcome`` (said once, here)."""
        if self._plateau is None:
            return False
        message = self._plateau.trial_finished(outcome.state, outcome.value, outcome.constraints)
        if message is None:
            return False
        self.out(message)
        if self.running:
            self.out(f"waiting for {len(self.running)} running trial(s)")
        return True

    def _stop_running(self, why: str) -> None:
        if not self.running:
            return
        self.out(f"{why}: stopping {len(self.running)} running trial(s)")
        for run in self.running.values():
            run.interrupt()
        # Later signals are ignored (StopSignals): the trials are being recorded for
        # a retry. Each trial's thread always reports (TrialRun._run_safely); the bound only
        # guards against a thread that died before it could.
        limit_s = self.spec.trials.stop_grace_s + 60.0
        while self.running:
            try:
                outcome = self.events.get(timeout=limit_s)
            except queue.Empty:
                return
            self.running.pop(outcome.number, None)
            self._record(outcome)

    def _build_observers(self) -> None:
        """The observers the study file asks for (progress, MLflow), then the caller's."""
        self.observers, view = for_run(
            self._observer_factory,
            self.spec,
            self.study,
            progress=self._progress_view,
            out=self.out,
            extra=self._extra_observers,
        )
        if view is not None:
            self.out = view.out
            self._prints_trial_lines = False  # the progress observer prints them
        self.handle = dataclasses.replace(self.handle, observers=self.observers)

    def _record(self, outcome: TrialOutcome) -> None:
        self.outcomes.append(outcome)
        event = outcome.event()
        if self._prints_trial_lines:
            self.out(run_messages.trial_line(event, self.spec.objective.names))
        self.observers.trial_finished(event)

    def _n_done(self) -> int:
        states = (trial_state("COMPLETE"), trial_state("PRUNED"))
        done = self.study.get_trials(deepcopy=False, states=states)
        return sum(not t.system_attrs.get(PRIOR_ATTR) for t in done)  # not copied ones

    def _study_ended(self, exit_code: int) -> None:
        self.observers.study_ended(ended_event(self.study, self.spec, exit_code))

    def print_summary(self) -> None:
        for line in run_messages.run_summary(self.spec, self.study.get_trials(deepcopy=False)):
            self.out(line)


__all__ = [
    "EXIT_INTERRUPTED",
    "StudyRunner",
]
