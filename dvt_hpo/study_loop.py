"""The study loop: ask -> launch -> tell, the budget, the stopping rules, the observers.

The CLI builds a :class:`~dvt_hpo.spec.StudySpec`; :class:`StudyRunner` supervises; each
:class:`~dvt_hpo.trial_run.TrialRun` owns one trial's process group and control socket. The
orchestrator never imports torch: trials run in their own processes.

What has no run state lives elsewhere: stopping rules in :mod:`dvt_hpo.stop_rules`, printed
wording in :mod:`dvt_hpo.run_messages`, a trial's config in :mod:`dvt_hpo.trial_config`,
recovery and the budget in :mod:`dvt_hpo.recovery`. This module stays one class (about 500
lines) because every method left shares the run's state: the study lock, the running trials,
the ledger and the event queue.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from dvt_hpo import devices, launch, recovery, run_messages, space, stop_rules, trial_config
from dvt_hpo.constraints import feasible
from dvt_hpo.events import StudyEnded, StudyObserver, StudyStarted, TrialFinished, TrialStarted
from dvt_hpo.exceptions import DvtHpoError
from dvt_hpo.front import Best, select_best
from dvt_hpo.import_path import child_pythonpath
from dvt_hpo.observers import Observers, study_observers
from dvt_hpo.spec import BUILTIN_ENTRYPOINT
from dvt_hpo.stop_signals import StopSignals
from dvt_hpo.storage import redact_url
from dvt_hpo.storage_errors import with_retry
from dvt_hpo.study_setup import (
    StudyCache,
    check_runs_dir,
    open_study,
    reseeded_sampler,
    study_settings,
)
from dvt_hpo.trial_run import TrialOutcome, TrialRun, tell

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec import StudySpec

# Exit code of a run stopped by Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130
_log = logging.getLogger(__name__)
T = TypeVar("T")


class StudyStopped(DvtHpoError):
    """The study stopped itself (e.g. ``study.max_failures`` reached): exit code 1."""


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
    ) -> None:
        self.spec = spec
        self.allow_space_change = allow_space_change
        # Without an ``out`` (the CLI), the progress observer prints: a live view on a
        # terminal, plain lines elsewhere; with one (notebooks, tests), plain lines go to it.
        self._progress_view = out is None
        self.retry_failed = retry_failed
        self.out = out or (lambda line: print(line, flush=True))
        self._extra_observers = list(observers)
        self.observers = Observers(self._extra_observers, self.out)
        # None while new trials may start, else why not (a Slurm job's time limit near).
        if launch_gate is None:
            from dvt_hpo.cluster.time_limit import gate_for_environment

            launch_gate = gate_for_environment(spec)
        self.launch_gate = launch_gate
        self._prints_trial_lines = True
        self.study_lock = threading.RLock()
        self._db_down_since: float | None = None  # monotonic time the outage was first seen
        self.events: queue.Queue[TrialOutcome] = queue.Queue()
        self.running: dict[int, TrialRun] = {}
        self.child_env = {
            **os.environ,
            "PYTHONPATH": child_pythonpath(spec.path.parent),
            "PYTHONUNBUFFERED": os.environ.get("PYTHONUNBUFFERED", "1"),
        }
        self.launcher = launch.Launcher(
            launcher=spec.trials.launcher,
            nproc_per_node=spec.trials.nproc_per_node,
            warm=spec.trials.warm,
            preload=launch.warm_modules(
                spec.trainer.entrypoint, BUILTIN_ENTRYPOINT, spec.trials.preload
            ),
            base_env=self.child_env,
            cwd=spec.path.parent,
            log_path=spec.trials.runs_dir / "warm-template.log",
            # What the template's warm-up hooks write (import-time settings and caches) stays
            # in the study's runs folder.
            warm_dir=spec.trials.runs_dir / "warm-template",
            log_limit=spec.trials.log_limit,
            out=lambda line: self.out(line),
        )
        self.study: optuna.Study
        self.storage: Any
        self.cache: StudyCache
        self.ledger: recovery.Ledger
        self._stop_heartbeat = threading.Event()
        self.outcomes: list[TrialOutcome] = []
        self.config_key = ""
        self._reseeded = False
        self._awaited: tuple[int, ...] = ()
        self.stop_signals: StopSignals | None = None  # while the loop runs

    def open_study(self) -> optuna.Study:
        # Before the storage is touched: a trial's folder that cannot be made would otherwise
        # fail only once the study is written.
        check_runs_dir(self.spec)
        try:
            self.study, self.storage, self.study_id = open_study(
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
        self.cache = StudyCache(self.storage, self.study_id, self.study_lock)
        self.ledger = recovery.Ledger(self.study, self.storage, self.study_id)
        self.config_key = trial_config.store_base(self.storage, self.study_id, self.spec)
        self._reconcile()
        if self.retry_failed:
            numbers = recovery.retry_failed(self.study)
            self.out(
                f"--retry-failed: trial(s) {', '.join(map(str, numbers))} enqueued again"
                if numbers
                else "--retry-failed: no failed trial to retry"
            )
        return self.study

    # -- budget and recovery ------------------------------------------------------------
    def _reconcile(self) -> None:
        with self.study_lock:
            recovery.reconcile(
                self.study,
                self.storage,
                grace_period_s=self.spec.study.grace_period_s,
                max_retries=self.spec.trials.max_retries,
                is_ours=self.running.__contains__,
            )

    def budget(self) -> recovery.Budget:
        with self.study_lock:
            self.db(self.ledger.refresh, "counting the budget")
            return self.ledger.budget(self.running.__contains__)

    def db(self, call: Callable[[], T], what: str) -> T:
        """``call()`` on the study's storage, retried while the database is unreachable for up
        to ``study.storage_retry_s`` (then one StorageError line); said once per outage."""

        def on_retry(exc: BaseException, waited_s: float) -> None:
            if self._db_down_since is None:
                self._db_down_since = time.monotonic()
                self.out(
                    f"database unreachable ({redact_url(self.spec.study.storage)}): retrying "
                    f"for up to {self.spec.study.storage_retry_s:g} s; trials keep training"
                )

        result = with_retry(
            call,
            retry_s=self.spec.study.storage_retry_s,
            what=what,
            url=self.spec.study.storage,
            on_retry=on_retry,
        )
        if self._db_down_since is not None:
            down_s = time.monotonic() - self._db_down_since
            self._db_down_since = None
            self.out(f"database reachable again after {down_s:.0f} s")
        return result

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
            ):
                self.out(
                    f"study {spec.study.name!r} ({where}) already has {budget.used}/{n_trials} "
                    "trials; nothing to run"
                )
                self.print_summary()
                exit_code = 0
                return self.study
            n_done = self._n_done()
            self.out(
                f"study {spec.study.name!r} on {where}: "
                f"{run_messages.objective_text(spec.objective)}; "
                + (f"{n_done}/{n_trials} trials done, " if n_trials else f"{n_done} done, ")
                + f"{spec.trials.parallel} at a time"
            )
            self.out(run_messages.dashboard_hint(spec.study.storage))
            stop_message = self._loop()
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
                for t in self.study.get_trials(deepcopy=False, states=(_state("RUNNING"),))
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

    def _loop(self) -> str | None:
        spec = self.spec
        n_trials = spec.study.n_trials
        free_slots = devices.split_devices(
            spec.trials.devices, spec.trials.parallel, nproc_per_node=spec.trials.nproc_per_node
        )
        heartbeat = threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True)
        heartbeat.start()
        deadline = (
            time.monotonic() + spec.study.timeout_s if spec.study.timeout_s is not None else None
        )
        launching = True
        stop_message: str | None = None
        stop_signals = self.stop_signals = StopSignals().install()
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
                    foreign = budget.foreign_running
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
                if launching and deadline is not None:
                    wait_s = min(wait_s, max(0.0, deadline - time.monotonic()))
                outcome = stop_signals.get(self.events, wait_s)
                if outcome is None:
                    continue
                run = self.running.pop(outcome.number)
                free_slots.append(run.slot)
                self._record(outcome)
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

    def _launch(self, slot: devices.Slot) -> bool:
        """Ask for a trial and start it in ``slot``; False when the study's budget turned out
        to be used up by another worker between our count and our ask."""
        with self.study_lock:
            trial = self.db(self.study.ask, "asking for a trial")
        try:
            return self._start(trial, slot)
        except KeyboardInterrupt:
            # Stopped before it ran: recorded for a retry, as a running trial would be.
            with contextlib.suppress(Exception), self.study_lock:
                recovery.fail_attempt(
                    self.study,
                    self.storage,
                    trial._trial_id,
                    retry=True,
                    max_retries=self.spec.trials.max_retries,
                )
            raise
        except Exception as exc:
            # Nothing runs for this trial: end it with the reason, not RUNNING until stale.
            with contextlib.suppress(Exception), self.study_lock:
                trial.set_user_attr("status", "failed")
                trial.set_user_attr("reason", f"orchestrator error: {type(exc).__name__}: {exc}")
                tell(self.study, trial, state=_state("FAIL"), skip_if_finished=True)
            raise

    def _start(self, trial: optuna.Trial, slot: devices.Slot) -> bool:
        spec = self.spec
        with self.study_lock:
            trial_id = trial._trial_id  # Optuna exposes no public id; storages need it
            if not self._reseeded:
                # Samplers draw lazily (at the first suggest), so re-seeding now decides this
                # trial's params too. The first trial number a worker gets is unique among all
                # workers of the study (the storage assigns it atomically) and is the same
                # for a lone worker on the same study: distinct streams, reproducible alone.
                self._reseeded = True
                self.study.sampler = reseeded_sampler(self.spec, trial.number)
            self.storage.set_trial_system_attr(trial_id, trial_config.TRIAL_ATTR, self.config_key)
            # A RUNNING trial without a heartbeat is never found stale: record one at once.
            recovery.record_heartbeat(self.storage, trial_id)
            retried = recovery.retried_trial_number(self.storage.get_trial(trial_id))
            if retried is None and self._over_budget(trial.number):
                # Storages number trials atomically, so "the first n_trials count" is exact
                # across workers; the extra one is closed at once and never counted.
                self.storage.set_trial_system_attr(trial_id, recovery.OVER_BUDGET_ATTR, True)
                trial.set_user_attr("status", "over-budget")
                trial.set_user_attr(
                    "reason", "another worker took the last trial of study.n_trials first"
                )
                tell(self.study, trial, state=_state("FAIL"))
                return False
            params = space.sample(trial, spec.search_space)
        config = trial_config.trial_run_config(spec, params, trial.number)
        run = TrialRun(self, trial, params, config, slot)
        attrs = self.observers.trial_started(
            TrialStarted(trial.number, trial_id, params, retried, time.time())
        )
        if retried is not None:
            attrs["retry_of"] = retried
        with self.study_lock:
            for key, value in attrs.items():
                trial.set_user_attr(key, value)
        self.running[trial.number] = run
        try:
            run.start()
        except BaseException:
            self.running.pop(trial.number, None)
            raise
        return True

    def _over_budget(self, number: int) -> bool:
        n_trials = self.spec.study.n_trials
        if n_trials is None:
            return False
        self.ledger.refresh()
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
        progress, defaults = study_observers(
            self.spec, self.study, progress=self._progress_view, out=self.out
        )
        if progress is not None:
            self.out = progress.out
            self._prints_trial_lines = False  # the progress observer prints them
        self.observers = Observers([*defaults, *self._extra_observers], self.out)

    def _record(self, outcome: TrialOutcome) -> None:
        self.outcomes.append(outcome)
        event = TrialFinished(
            number=outcome.number,
            trial_id=outcome.trial_id,
            state=outcome.state,
            value=outcome.value,
            params=dict(outcome.params),
            reason=outcome.reason,
            duration_s=round(outcome.duration_s, 3),
            user_attrs=dict(outcome.user_attrs),
            values=outcome.values,
            feasible=(
                feasible(outcome.constraints)
                if outcome.constraints and outcome.state == "COMPLETE"
                else None
            ),
        )
        if self._prints_trial_lines:
            self.out(run_messages.trial_line(event, self.spec.objective.names))
        self.observers.trial_finished(event)

    def _n_done(self) -> int:
        states = (_state("COMPLETE"), _state("PRUNED"))
        return len(self.study.get_trials(deepcopy=False, states=states))

    def _best(self) -> Best:
        return select_best(
            self.study.get_trials(deepcopy=False, states=(_state("COMPLETE"),)),
            self.spec.objective.directions,
        )

    def _study_ended(self, exit_code: int) -> None:
        best_value = best_params = best_number = None
        front: tuple[int, ...] = ()
        with contextlib.suppress(Exception):
            best = self._best()
            if self.spec.objective.is_multi:
                front = tuple(t.number for t in best.trials)
            elif best.trials:
                top = best.trials[0]
                best_value, best_params, best_number = top.value, dict(top.params), top.number
        n_done = 0
        with contextlib.suppress(Exception):
            n_done = self._n_done()
        self.observers.study_ended(
            StudyEnded(n_done, best_value, best_params, best_number, exit_code, front)
        )

    def print_summary(self) -> None:
        trials = self.study.get_trials(deepcopy=False)
        best = select_best(trials, self.spec.objective.directions)
        for line in run_messages.summary_lines(
            trials,
            best,
            self.spec.objective.names,
            self.spec.path,
            study_name=self.spec.study.name,
            constraints=[c.metric for c in self.spec.objective.constraints],
        ):
            self.out(line)


def _state(name: str) -> Any:
    from optuna.trial import TrialState

    return TrialState[name]


def run_study(
    path: str | os.PathLike[str],
    overrides: tuple[str, ...] | list[str] = (),
    *,
    allow_space_change: bool = False,
    retry_failed: bool = False,
    out: Callable[[str], None] | None = None,
    observers: Sequence[StudyObserver] = (),
) -> optuna.Study:
    """Run (or resume) the study of a study.yaml file; returns the Optuna study.

    The same as ``dvt-hpo run PATH --set ...``, for notebooks and scripts.
    """
    from dvt_hpo.spec import load_spec

    spec = load_spec(path, overrides, check_runnable=True)
    runner = StudyRunner(
        spec,
        allow_space_change=allow_space_change,
        retry_failed=retry_failed,
        out=out,
        observers=observers,
    )
    return runner.run()


__all__ = [
    "EXIT_INTERRUPTED",
    "StudyRunner",
    "StudyStopped",
    "run_study",
]
