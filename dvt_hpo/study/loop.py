"""The study loop: ask -> launch -> tell, the budget, the stopping rules, the observers.

The CLI builds a :class:`~dvt_hpo.studyfile.StudySpec`; :class:`StudyRunner` supervises; each
:class:`~dvt_hpo.study.trial_run.TrialRun` owns one trial's process group and control socket. The
orchestrator never imports torch: trials run in their own processes.

What has no run state lives elsewhere: stopping rules in :mod:`dvt_hpo.stopping.rules`, printed
wording in :mod:`dvt_hpo.study.messages`, a trial's config in :mod:`dvt_hpo.store.trial_config`,
recovery and the budget in :mod:`dvt_hpo.recovery.retries`, the study's end as an event in
:mod:`dvt_hpo.results.front`. This module stays one class because every method left shares the
run's state: the study lock, the running trials, the ledger and the event queue.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from dvt_hpo.batch.cache import StudyCache
from dvt_hpo.budget import compute as compute_budget
from dvt_hpo.devices import slots as device_slots
from dvt_hpo.exceptions import DvtHpoError, StudyStopped
from dvt_hpo.optuna_api.private import frozen_at_ask, set_trial_user_attrs, trial_id_of
from dvt_hpo.process.import_path import child_pythonpath
from dvt_hpo.recovery import kill_points, resume, stopped_nodes
from dvt_hpo.recovery import retries as recovery
from dvt_hpo.results.events import (
    StudyEnded,
    StudyObserver,
    StudyStarted,
    TrialStarted,
)
from dvt_hpo.results.front import study_ended
from dvt_hpo.results.outcome import TrialOutcome
from dvt_hpo.sampling import space
from dvt_hpo.stopping import plateau
from dvt_hpo.stopping import rules as stop_rules
from dvt_hpo.stopping.signals import StopSignals
from dvt_hpo.store import lock as storage_lock
from dvt_hpo.store import trial_config
from dvt_hpo.store.errors import OutageRetry
from dvt_hpo.study import messages as run_messages
from dvt_hpo.study.handle import StudyHandle
from dvt_hpo.study.observers import ObserverFactory, Observers
from dvt_hpo.study.setup import (
    check_runs_dir,
    launcher_for,
    open_for_run,
    reseeded_sampler,
    study_settings,
)
from dvt_hpo.study.trial_run import TrialRun, tell
from dvt_hpo.text.redact import redact_url

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.studyfile import StudySpec

# Exit code of a run stopped by Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130
_log = logging.getLogger(__name__)
T = TypeVar("T")


# How often a run with no trial of its own running re-reads the study while other workers'
# trials run (one small query of the unfinished trials).
FOREIGN_POLL_S = 1.0


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
        self.ledger: recovery.Ledger
        self._stop_heartbeat = threading.Event()
        self.outcomes: list[TrialOutcome] = []
        self.config_key = ""
        self._reseeded = False
        self._awaited: tuple[int, ...] = ()
        self._plateau: plateau.PlateauWatch | None = None  # study.plateau, from the loop's start
        self.stop_signals: StopSignals | None = None  # while the loop runs
        # Set when this worker is told to stop (Ctrl-C, SIGTERM): its trials' threads read it.
        self.worker_stopped = threading.Event()

    def open_study(self) -> optuna.Study:
        # Before the storage is touched: a trial's folder that cannot be made would otherwise
        # fail only once the study is written.
        check_runs_dir(self.spec)
        try:
            opened = open_for_run(
                self.spec, allow_space_change=self.allow_space_change, out=self.out
            )
        except DvtHpoError:
            raise
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0]
            raise StudyStopped(
                f"cannot open study.storage {redact_url(self.spec.study.storage)}: "
                f"{type(exc).__name__}: {first}"
            ) from exc
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
            budget=compute_budget.watch(self),  # study.budget: gates launches, strict stops
            out=self.out,
        )
        self.ledger = recovery.Ledger(
            self.study, self.storage, self.study_id, max_retries=self.spec.trials.max_retries
        )
        self.config_key = trial_config.store_base(self.storage, self.study_id, self.spec)
        self._reconcile()
        if self.retry_failed:
            numbers = recovery.retry_failed(self.study, lock=self.retry_lock)
            self.out(
                f"--retry-failed: trial(s) {', '.join(map(str, numbers))} enqueued again"
                if numbers
                else "--retry-failed: no failed trial to retry"
            )
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

    def _reconcile(self) -> None:
        with self.study_lock:
            recovery.reconcile(
                self.study,
                self.storage,
                grace_period_s=self.spec.study.grace_period_s,
                max_retries=self.spec.trials.max_retries,
                is_ours=self.running.__contains__,
                lock=self.retry_lock,
                on_failed=resume.sweep_hook(self.spec),
            )

    def budget(self) -> recovery.Budget:
        with self.study_lock:
            self.db(self.ledger.refresh, "counting the budget")
            return self.ledger.budget(self.running.__contains__)

    def _heartbeat_loop(self) -> None:
        interval_s = self.spec.study.heartbeat_interval_s
        while not self._stop_heartbeat.wait(interval_s):
            for run in list(self.running.values()):
                with contextlib.suppress(Exception), self.study_lock:
                    recovery.record_heartbeat(self.storage, run.trial_id)
            with contextlib.suppress(Exception):
                self._reconcile()

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
        self.observers.study_started(
            StudyStarted(
                study_name=spec.study.name,
                storage=where,
                direction=",".join(spec.objective.directions),
                metric=",".join(spec.objective.names),
                n_trials=n_trials,
                n_done=self._n_done(),
                study_file=str(spec.path.resolve()),
                space=study_settings(spec)["space"],
                settings={k: v for k, v in study_settings(spec).items() if k != "space"},
            )
        )
        exit_code = 1
        try:
            if (
                n_trials is not None
                and budget.used >= n_trials
                and not budget.waiting
                and not budget.foreign_running
                and not budget.pending
            ):
                self.out(
                    f"study {spec.study.name!r} ({where}) already has {budget.used}/{n_trials} "
                    "trials; nothing to run"
                )
                self.print_summary()
                exit_code = 0
                return self.study
            n_done = self._n_done()
            slots = device_slots.split_devices(
                spec.trials.devices,
                spec.trials.parallel,
                nproc_per_node=spec.trials.nproc_per_node,
                per_gpu=spec.trials.per_gpu,
            )
            packing = spec.trials.per_gpu > 1  # also said when ignored (no GPU)
            self.out(
                f"study {spec.study.name!r} on {where}: "
                f"{run_messages.objective_text(spec.objective)}; "
                f"{run_messages.spec_algorithms_text(spec)}; "
                + (f"{n_done}/{n_trials} trials done, " if n_trials else f"{n_done} done, ")
                + f"{spec.trials.parallel} at a time"
                + (f", {device_slots.packing_text(slots, spec.trials.per_gpu)}" if packing else "")
                + (f"; resume states in {resume.resume_root(spec)}" if spec.trials.resume else "")
            )
            for note in self.launcher.notes:
                self.out(note)
            self.out(run_messages.dashboard_hint(spec.path, spec.overrides))
            stop_message = self._loop(slots)
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

    def _await_foreign(self) -> None:
        """Say once per set of trials which RUNNING trials of other (or dead) orchestrators
        this run waits on, their heartbeat age and the longest wait before they are retried."""
        with self.study_lock:
            foreign = [
                t
                for t in self.study.get_trials(
                    deepcopy=False, states=(recovery.trial_state("RUNNING"),)
                )
                if t.number not in self.running
            ]
            ages = recovery.heartbeat_ages(self.storage, foreign)
        numbers = tuple(t.number for t in foreign)
        if numbers and numbers != self._awaited:
            self.out(
                run_messages.waiting_line(
                    numbers,
                    ages,
                    grace_period_s=self.spec.study.grace_period_s,
                    heartbeat_interval_s=self.spec.study.heartbeat_interval_s,
                )
            )
        self._awaited = numbers

    def _loop(self, slots: Sequence[device_slots.Slot]) -> str | None:
        spec = self.spec
        n_trials = spec.study.n_trials
        free_slots = list(slots)
        heartbeat = threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True)
        heartbeat.start()
        deadline = (
            time.monotonic() + spec.study.timeout_s if spec.study.timeout_s is not None else None
        )
        launching = True
        stop_message: str | None = None
        if spec.study.plateau is not None:
            with self.study_lock:
                done = self.study.get_trials(deepcopy=False)
            self._plateau = plateau.PlateauWatch.for_study(spec, done)
        node_watch = stopped_nodes.NodeWatch(spec.trials.node_failures, self.handle)
        stop_signals = self.stop_signals = StopSignals(self.worker_stopped).install()
        try:
            while True:
                if launching and deadline is not None and time.monotonic() >= deadline:
                    launching = False
                    self.out(f"study.timeout_s={spec.study.timeout_s:g} reached: no new trials")
                if launching and free_slots and self.launch_gate is not None:
                    refused = self.launch_gate(self.study)
                    if refused is not None:
                        launching = False
                        self.out(refused)
                foreign = 0
                while launching and free_slots:
                    budget = self.budget()
                    # A failed attempt whose copy is not enqueued yet (its worker died on the
                    # way) is waited on like a foreign trial: the sweep enqueues it.
                    foreign = budget.foreign_running + budget.pending
                    if n_trials is not None and budget.used >= n_trials and not budget.waiting:
                        break
                    slot = free_slots.pop(0)
                    if not self._launch(slot):
                        free_slots.append(slot)
                if not self.running and not (launching and foreign):
                    # Trials of a dead orchestrator stay RUNNING until their heartbeat goes
                    # stale; waiting for them lets this worker retry them instead of leaving.
                    break
                if launching and foreign and not self.running:
                    self._await_foreign()
                # Bounded, so that retries enqueued by the heartbeat reconciliation (and the
                # study deadline) are noticed while trials run.
                wait_s = float(spec.study.heartbeat_interval_s)
                if launching and foreign and not self.running:
                    # Only other workers' trials run: notice their end within about a second,
                    # so that a worker with nothing left exits then (with --workers K, the
                    # last one's siblings otherwise sat idle a whole heartbeat interval).
                    wait_s = min(wait_s, FOREIGN_POLL_S)
                if launching and deadline is not None:
                    wait_s = min(wait_s, max(0.0, deadline - time.monotonic()))
                outcome = stop_signals.get(self.events, wait_s)
                if outcome is None:
                    continue
                run = self.running.pop(outcome.number)
                free_slots.append(run.slot)
                if outcome.told is not None:
                    with self.study_lock:
                        self.ledger.told(outcome.told)
                self._record(outcome)
                if (broken := node_watch.finished(self.outcomes)) is not None:
                    launching, stop_message = False, broken  # exit 1; its trials are retried
                    self._stop_running("this node looks broken")
                    continue
                if launching and self._plateau_reached(outcome):
                    # Not an error: the run ends with exit 0 once its running trials finish.
                    launching = False
                if outcome.state == "FAIL" and not outcome.interrupted and launching:
                    stop_message = stop_rules.stop_message(
                        self.outcomes, spec.study.max_failures, n_trials
                    )
                    if stop_message is not None:
                        # The message itself is printed once, as the run's error, at the end.
                        launching = False
                        if self.running:
                            self.out(
                                "no new trials (a stopping rule was reached); waiting for "
                                f"{len(self.running)} running trial(s)"
                            )
        except KeyboardInterrupt:
            self._interrupt()
            raise
        finally:
            stop_signals.restore()
            self._stop_heartbeat.set()
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

    def _launch(self, slot: device_slots.Slot) -> bool:
        """Ask for a trial and start it in ``slot``; False when the study's budget turned out
        to be used up by another worker between our count and our ask."""
        signals = self.stop_signals or StopSignals()
        with signals.deferred(), self.study_lock:  # a Ctrl-C here is raised in the try below
            trial = self.db(self.study.ask, "asking for a trial")
        kill_points.reached("ask")
        try:
            signals.check()
            return self._start(trial, slot)
        except KeyboardInterrupt:
            # Stopped before it ran: recorded for a retry, as a running trial would be.
            with contextlib.suppress(Exception), self.study_lock:
                self.fail_attempt(trial_id_of(trial))
            raise
        except Exception as exc:
            if self._ended_elsewhere(trial, exc):
                return False
            # Nothing runs for this trial: end it with the reason, not RUNNING until stale.
            with contextlib.suppress(Exception), self.study_lock:
                reason = f"orchestrator error: {type(exc).__name__}: {exc}"
                attrs = {"status": "failed", "reason": reason}
                set_trial_user_attrs(self.storage, trial_id_of(trial), attrs)
                tell(self.study, trial, state=recovery.trial_state("FAIL"), skip_if_finished=True)
            raise

    def _ended_elsewhere(self, trial: optuna.Trial, exc: Exception) -> bool:
        """Whether another worker's stale sweep finished ``trial`` before its launch (an
        overloaded machine): that worker recorded it and queued its copy; this one goes on."""
        import optuna

        if not isinstance(exc, optuna.exceptions.UpdateFinishedTrialError):
            return False
        with self.study_lock:
            trial_id = trial_id_of(trial)
            stored = self.db(lambda: self.storage.get_trial(trial_id), "reading a trial")
        retried = recovery.RETRY_ATTR in stored.system_attrs
        grace_s = self.spec.study.grace_period_s
        self.out(run_messages.ended_before_start(trial.number, retried=retried, grace_s=grace_s))
        return True

    def _start(self, trial: optuna.Trial, slot: device_slots.Slot) -> bool:
        spec = self.spec
        with self.study_lock:
            trial_id = trial_id_of(trial)
            if not self._reseeded:
                # Samplers draw lazily (at the first suggest), so re-seeding now decides this
                # trial's params too. The first trial number a worker gets is unique among all
                # workers of the study (the storage assigns it atomically) and is the same
                # for a lone worker on the same study: distinct streams, reproducible alone.
                self._reseeded = True
                self.study.sampler = reseeded_sampler(self.spec, trial.number)
            self.storage.set_trial_system_attr(trial_id, trial_config.TRIAL_ATTR, self.config_key)
            # Until its first heartbeat only its start time tells other workers it is alive
            # (dvt_hpo.recovery.stale): record one at once.
            recovery.record_heartbeat(self.storage, trial_id)
            kill_points.reached("start:heartbeat")
            started = frozen_at_ask(trial)  # what the ledger and the retry mark need
            retried = recovery.retried_trial_number(started)
            # A copy stands in its original's place (the first of its chain): over budget
            # when that was, e.g. an attempt asked past the budget whose worker was killed
            # before it could close it.
            if self._over_budget(trial.number if retried is None else retried, started):
                # Storages number trials atomically, so "the first n_trials count" is exact
                # across workers; the extra one is closed at once and never counted.
                self.storage.set_trial_system_attr(trial_id, recovery.OVER_BUDGET_ATTR, True)
                reason = "another worker took the last trial of study.n_trials first"
                attrs = {"status": "over-budget", "reason": reason}
                set_trial_user_attrs(self.storage, trial_id, attrs)
                tell(self.study, trial, state=recovery.trial_state("FAIL"))
                resume.closed_unrun(spec, self.storage.get_trial(trial_id))
                return False
            params = space.sample(trial, spec.search_space)
        kill_points.reached("start:params")
        config = trial_config.trial_run_config(spec, params, trial.number)
        run = TrialRun(self.handle, trial, params, config, slot)
        attrs = self.observers.trial_started(
            TrialStarted(trial.number, trial_id, params, retried, time.time())
        )
        if retried is not None:
            attrs["retry_of"] = retried
        with self.study_lock:
            set_trial_user_attrs(self.storage, trial_id, attrs)  # one transaction
        self.running[trial.number] = run
        try:
            run.start()
        except BaseException:
            self.running.pop(trial.number, None)
            raise
        return True

    def _over_budget(self, number: int, started: optuna.trial.FrozenTrial) -> bool:
        n_trials = self.spec.study.n_trials
        if n_trials is None:
            return False
        self.ledger.refresh(known=started)  # just read: not read again
        return self.ledger.used(below=number) >= n_trials

    def _interrupt(self) -> None:
        self._stop_running("interrupted")

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
        progress, defaults = (None, [])
        if self._observer_factory is not None:
            progress, defaults = self._observer_factory(
                self.spec, self.study, progress=self._progress_view, out=self.out
            )
        if progress is not None:
            self.out = progress.out
            self._prints_trial_lines = False  # the progress observer prints them
        self.observers = Observers([*defaults, *self._extra_observers], self.out)
        self.handle = dataclasses.replace(self.handle, observers=self.observers)

    def _record(self, outcome: TrialOutcome) -> None:
        self.outcomes.append(outcome)
        event = outcome.event()
        if self._prints_trial_lines:
            self.out(run_messages.trial_line(event, self.spec.objective.names))
        self.observers.trial_finished(event)

    def _n_done(self) -> int:
        states = (recovery.trial_state("COMPLETE"), recovery.trial_state("PRUNED"))
        done = self.study.get_trials(deepcopy=False, states=states)
        return sum(not t.system_attrs.get(recovery.PRIOR_ATTR) for t in done)  # not copied ones

    def _study_ended(self, exit_code: int) -> None:
        event = StudyEnded(0, None, None, None, exit_code)
        with contextlib.suppress(Exception):  # the database may be why the run ends
            event = study_ended(
                self.study.get_trials(deepcopy=False), self.spec.objective.directions, exit_code
            )
        self.observers.study_ended(event)

    def print_summary(self) -> None:
        for line in run_messages.run_summary(self.spec, self.study.get_trials(deepcopy=False)):
            self.out(line)


__all__ = [
    "EXIT_INTERRUPTED",
    "StudyRunner",
]
