"""One trial's run: payload, process group, control socket, reports, and what Optuna records.

A :class:`TrialRun` moves through :class:`~dvt_hpo.results.outcome.Phase` in order on a thread of
its own; the control server calls its handler methods on the server's threads, so everything
they share with the study loop goes through the loop's study lock. What happened is decided by
the pure :func:`~dvt_hpo.results.outcome.classify`; this module only gathers its inputs and records
its answer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import shutil
import signal
import socket
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dvt_hpo.batch.cache import cache_key
from dvt_hpo.devices.gpu_share import GpuShare
from dvt_hpo.devices.slots import Slot
from dvt_hpo.optuna_api.private import set_trial_user_attrs, storage_of, trial_id_of
from dvt_hpo.process import cgroup, launch
from dvt_hpo.process.tree import TrialProcess, describe_exit
from dvt_hpo.recovery import kill_points, node_health, resume, retries
from dvt_hpo.results.events import TrialReported
from dvt_hpo.results.outcome import (
    Flags,
    Limits,
    Objective,
    Outcome,
    Phase,
    TrialOutcome,
    classify,
)
from dvt_hpo.sampling.constraints import store_constraints
from dvt_hpo.wire.control_server import ControlServer
from dvt_hpo.wire.payload import CommandPayload, TrialLimits, TrialPayload
from dvt_hpo.wire.protocol import ENV_LAUNCHED, Hello
from dvt_hpo.wire.result import ResultError, read_result

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.study.handle import StudyHandle

# Per metric, at most this many [step, value] points in the ``history`` user attr: Optuna
# stores user attrs as JSON text, and the dashboard draws a curve, not a log.
MAX_HISTORY_POINTS = 1000
_STDERR_TAIL_LINES = 50
_ATTR_TEXT_CHARS = 8000
# How long a trial that died of a signal waits for its worker's own stop signal (see
# TrialRun._stopped_with_worker); only crashed trials pay it.
_STOP_SIGNAL_WAIT_S = 2.0


def history_attr(
    history: list[tuple[int, dict[str, float]]], limit: int = MAX_HISTORY_POINTS
) -> dict[str, list[list[float]]]:
    """``{metric: [[step, value], ...]}``; a metric with more than ``limit`` points keeps
    ``limit`` of them evenly spread, the first and the last included."""
    series: dict[str, list[list[float]]] = {}
    for step, metrics in history:
        for name, value in metrics.items():
            # JSON has no NaN: a diverged value is kept as None.
            point = None if isinstance(value, float) and not math.isfinite(value) else value
            series.setdefault(name, []).append([step, point])  # type: ignore[list-item]
    for name, points in series.items():
        if len(points) > limit:
            last = len(points) - 1
            series[name] = [points[round(i * last / (limit - 1))] for i in range(limit)]
    return series


class TrialRun:
    """One trial: its payload, process group, control socket and the reports it streams."""

    def __init__(
        self,
        study: StudyHandle,
        trial: optuna.Trial,
        params: dict[str, Any],
        config: dict[str, Any],
        slot: Slot,
    ) -> None:
        self.study = study
        self.spec = study.spec
        self.trial = trial
        self.trial_id: int = trial_id_of(trial)
        self.number = trial.number
        self.params = params
        self.config = config
        self.slot = slot
        self.phase = Phase.ASKED
        self.history: list[tuple[int, dict[str, float]]] = []
        self.pruned_step: int | None = None
        self.diverged: tuple[int, float] | None = None  # (step, value) of a NaN/inf objective
        self.diverged_metric: str | None = None
        self.protocol_error: str | None = None
        self.attrs: dict[str, Any] = {}
        self.stop_event = threading.Event()
        self.interrupted = False
        self.timed_out = False
        # study.budget.strict: why it was stopped; _unanswered: by the loop, not by a report's
        # answer (so its process is stopped at once rather than left to exit on its own).
        self.over_budget: str | None = None
        self._unanswered_stop = False
        self.process: TrialProcess | None = None
        self._oom_kills: int | None = None  # the cgroup's count when the trial started
        self.start_time = time.monotonic()
        self.trial_dir = self.spec.trials.runs_dir / f"trial-{self.number:04d}"
        self.resume: resume.ResumePlan | None = None  # trials.resume: set at launch
        self.thread = threading.Thread(
            target=self._run_safely, name=f"trial-{self.number}", daemon=True
        )

    # -- control-socket handler (called on the server's threads) --------------------------
    def on_hello(self, hello: Hello) -> None:
        return None

    def on_protocol_error(self, message: str) -> None:
        self.protocol_error = message
        self.stop_event.set()

    def on_report(self, step: int, metrics: dict[str, float]) -> bool:
        if self.resume is not None:
            resume.before_report(self, int(step), metrics)
        self.history.append((int(step), dict(metrics)))
        if self.pruned_step is not None or self.diverged is not None:
            return True
        objective = self.spec.objective
        for name in objective.names:
            reported = metrics.get(name)
            if reported is not None and not math.isfinite(float(reported)):
                # A diverged run never recovers and Optuna cannot prune on NaN: stop it now
                # (the "prune" answer makes the trainer leave cleanly) and record it FAIL
                # "diverged".
                self.diverged = (int(step), float(reported))
                self.diverged_metric = name
                self.stop_event.set()
                return True
        if objective.is_multi:
            # Optuna cannot prune multi-objective trials (Trial.report raises): the epoch is
            # stored, so status and the dashboard show where the trial is, and a pruner for
            # several objectives decides on the values it stores itself.
            self._set_attrs({"last_step": int(step), "last_metrics": dict(metrics)})
            from dvt_hpo.sampling.mo_pruner import MULTI_OBJECTIVE_PRUNERS, report_and_prune

            if self.spec.study.pruner.kind not in MULTI_OBJECTIVE_PRUNERS:
                return False
            with self.study.lock:
                prune = self.study.db(
                    lambda: report_and_prune(
                        self.study.study,
                        self.trial_id,
                        int(step),
                        metrics,
                        objective.names,
                        objective.constraints,
                    ),
                    "a pruning decision",
                )
            if prune:
                self.pruned_step = int(step)
                self.stop_event.set()
            return prune
        value = metrics.get(objective.metric)
        prune = False
        if value is not None:

            def decide() -> bool:
                self.trial.report(float(value), int(step))
                return bool(self.trial.should_prune())

            with self.study.lock:
                prune = self.study.db(decide, "a pruning decision")
        budget = self.study.budget
        if not prune and budget is not None and budget.strict and self.over_budget is None:
            # After this report is stored: an epochs budget counts it, so the stop is exact.
            self.over_budget = budget.exhausted()
            prune = self.over_budget is not None
        if prune:
            self.pruned_step = int(step)
            self.stop_event.set()
        return prune

    def on_reported(self, step: int, metrics: dict[str, float], prune: bool) -> None:
        elapsed_s = time.monotonic() - self.start_time
        self.study.observers.trial_reported(
            TrialReported(self.number, int(step), dict(metrics), round(elapsed_s, 3))
        )

    def on_attrs(self, attrs: dict[str, Any]) -> None:
        self.attrs.update(attrs)
        self._set_attrs(attrs)

    def on_cache_get(self, key: str) -> dict[str, Any] | None:
        return self.study.cache.get(key)

    def on_cache_put(self, key: str, value: dict[str, Any]) -> None:
        self.study.cache.put(key, value)

    # -- life -------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def stop_over_budget(self, why: str) -> None:
        """``study.budget.strict``: stop now; recorded PRUNED at its last report (FAIL, not
        retried, without one)."""
        if self.over_budget is None:
            self.over_budget = why
        self._unanswered_stop = True
        if self.pruned_step is None and self.history:
            self.pruned_step = self.history[-1][0]
        self.stop_event.set()

    def interrupt(self) -> None:
        self.interrupted = True
        self.stop_event.set()

    def payload(self) -> TrialPayload:
        spec = self.spec
        bs = spec.batch_size
        precision = self.config.get("precision", {}) if isinstance(self.config, dict) else {}
        extra = {
            "entrypoint": spec.trainer.entrypoint,
            "precision": precision,
            "launcher": spec.trials.launcher,
            "nproc": spec.trials.nproc_per_node,
            "memory_limit": spec.trials.memory_limit,
        }
        share = GpuShare(self.slot.per_gpu) if self.slot.per_gpu > 1 else None
        if share is not None:
            # A size found with a whole GPU must never be reused in a share of one (nor one
            # found in a 1/2 share in a 1/4 one); keys without a share stay as they were.
            extra["gpu_share"] = dataclasses.asdict(share)
        return TrialPayload(
            entrypoint=spec.trainer.entrypoint,
            config=self.config,
            params=self.params,
            study_name=spec.study.name,
            trial_number=self.number,
            batch_size=bs,
            cache_key=cache_key(self.config, bs.memory_keys, extra) if bs.auto else None,
            devices=spec.trials.devices,
            gpus=self.slot.gpus,
            gpu_share=share,
            limits=TrialLimits(
                report_timeout_s=spec.trials.report_timeout_s,
                timeout_s=spec.trials.timeout_s,
                memory_limit=spec.trials.memory_limit,
            ),
            trial_dir=str(self.trial_dir),
            study_dir=str(spec.path.parent),
            command=self._command(),
            resume=self.resume.payload() if self.resume is not None else None,
        )

    def _command(self) -> CommandPayload | None:
        trainer = self.spec.trainer
        if trainer.command is None:
            return None
        return CommandPayload(
            argv=trainer.command,
            metrics_pattern=trainer.metrics_pattern,
            names={dim.name: dim.path for dim in self.spec.search_space},
            stop_grace_s=self.spec.trials.stop_grace_s,
        )

    def _run_safely(self) -> None:
        try:
            outcome = self._run()
        except BaseException as exc:  # noqa: BLE001 - a bug here must not hang the study
            reason = f"orchestrator error: {type(exc).__name__}: {exc}"
            try:
                outcome = self._record(Outcome("FAIL", "failed", reason=reason), None)
            except BaseException:  # noqa: BLE001 - the loop must hear of this trial anyway
                duration_s = time.monotonic() - self.start_time
                outcome = TrialOutcome(
                    self.number, self.trial_id, "FAIL", None, self.params, duration_s, reason
                )
                # Recording failed too: at least end it in the study (else it stays RUNNING
                # until its heartbeat goes stale and is retried as if its orchestrator died).
                with contextlib.suppress(Exception), self.study.lock:
                    self.study.storage.set_trial_state_values(
                        self.trial_id, retries.trial_state("FAIL")
                    )
        self.phase = Phase.FINISHED
        self.study.finished(outcome)

    def _run(self) -> TrialOutcome:
        spec = self.spec
        self.phase = Phase.LAUNCHING
        if self.trial_dir.exists():
            shutil.rmtree(self.trial_dir)
        self.trial_dir.mkdir(parents=True)
        if spec.trials.resume:
            self.resume, note = resume.prepare(self)
            self._set_attrs({"resume_dir": str(self.resume.state_dir)})
            if note is not None and self.study.out is not None:
                self.study.out(note)
        payload_path = self.trial_dir / "payload.json"
        self.payload().write(payload_path)

        with ControlServer(None, self) as server:
            env = launch.trial_env(
                self.study.child_env, self.slot, server.path, spec.trials.memory_limit
            )
            threads = env.get("OMP_NUM_THREADS", "")
            self._set_attrs(
                {"log_dir": str(self.trial_dir), "host": socket.gethostname()}
                | (
                    {"devices": self.slot.cuda_visible_devices}
                    if self.slot.cuda_visible_devices is not None
                    else {}
                )
                | ({"gpu_share": f"1/{self.slot.per_gpu}"} if self.slot.per_gpu > 1 else {})
                # The CPU threads it got (a trainer may record what it really used): `best
                # --export` carries them, as a thread count changes the numbers.
                | ({"threads": int(threads)} if threads.isdigit() else {})
            )
            if self.study.budget is not None:  # what this trial occupies, for study.budget
                self.study.budget.record_units(self.trial_id, self.slot, spec.trials.nproc_per_node)
            env[ENV_LAUNCHED] = repr(time.time())
            self._oom_kills = cgroup.oom_kills()
            self.process = self.study.launcher.start(payload_path, env, self.trial_dir)
            kill_points.reached("trial:running")
            if self.process.warm:
                self._set_attrs({"warm_start": True})
            self.phase = Phase.RUNNING
            waiter = threading.Thread(
                target=self._wait_exit, name=f"trial-{self.number}-wait", daemon=True
            )
            waiter.start()
            if not self.stop_event.wait(spec.trials.timeout_s):
                self.timed_out = True
            self.phase = Phase.STOPPING
            stopped_by_answer = (
                self.pruned_step is not None or self.diverged is not None
            ) and not self._unanswered_stop
            if stopped_by_answer and self.process.poll() is None:
                # The chief raises TrialPruned on the decision and exits on its own; a signal
                # now would turn its clean "pruned" into "stopped". The grace bounds the wait.
                self.process.wait(spec.trials.stop_grace_s)
            if self.process.poll() is None:
                self.process.stop(spec.trials.stop_grace_s)
            returncode = self.process.wait(None)
            # The last reports and attrs may still be in flight on the socket.
            server.drain(timeout_s=5)
        self.phase = Phase.RECORDING
        return self._conclude(returncode)

    def _wait_exit(self) -> None:
        assert self.process is not None
        self.process.wait(None)
        self.stop_event.set()

    def _stopped_with_worker(self, returncode: int | None) -> bool:
        """A trial process that died of a signal while its worker is being stopped was
        interrupted too: a Slurm job's end (time limit, preemption, scancel) signals every
        process of the job, so the trial (or the warm template it dies with) may end a moment
        before the worker's own handler flags the interrupt. Waits briefly for that flag."""
        if self.timed_out or returncode is None or 0 <= returncode < 128:
            return False
        return self.study.worker_stopped.wait(_STOP_SIGNAL_WAIT_S)

    def _conclude(self, returncode: int | None) -> TrialOutcome:
        spec = self.spec
        try:
            result = read_result(self.trial_dir / "result.json")
            rank_errors = [
                error
                for path in sorted(self.trial_dir.glob("error-rank*.json"))
                if (error := read_result(path)) is not None
            ]
        except ResultError as exc:
            # Another version's (or a hand-edited) file: how the trial ended is unknown.
            result, rank_errors = None, []
            self.protocol_error = self.protocol_error or str(exc)
        outcome = classify(
            result,
            returncode,
            Flags(
                self.pruned_step,
                self.interrupted or self._stopped_with_worker(returncode),
                self.timed_out,
                self.protocol_error,
                self.diverged,
                self.diverged_metric,
            ),
            objective=Objective(
                spec.objective.metric,
                spec.objective.direction,
                spec.objective.reduce,
                others=spec.objective.names[1:],
                constraints=spec.objective.constraints,
            ),
            history=self.history,
            rank_errors=rank_errors,
            limits=Limits(spec.trials.timeout_s, spec.trials.memory_limit, self.slot.per_gpu),
            pruner=spec.study.pruner.kind,
        )
        outcome = self._killed_by_cgroup_oom(outcome, returncode)
        if self.over_budget is not None and outcome.state != "COMPLETE":
            why = f"stopped: {self.over_budget} (study.budget.strict)"
            outcome = dataclasses.replace(outcome, reason=why, retry=False)
        attrs: dict[str, Any] = {}
        if result is not None and result.startup_s is not None:
            # Launch to the entry point's call: what a warm start saves.
            attrs["startup_s"] = result.startup_s
        if result is not None and result.status == "ok" and result.metrics:
            attrs["final_metrics"] = result.metrics
        return self._record(outcome, returncode, attrs)

    def _record(
        self, outcome: Outcome, returncode: int | None, extra: dict[str, Any] | None = None
    ) -> TrialOutcome:
        """Store the trial's attrs (``extra`` and its own, in one transaction) and tell Optuna
        (a retried FAIL through the recovery rule: one copy per failed attempt, by any worker)."""
        duration_s = time.monotonic() - self.start_time
        machine, machine_retry = self._machine_failure(outcome)
        attrs: dict[str, Any] = {
            **(extra or {}),
            "duration_s": round(duration_s, 3),
            "exit": describe_exit(returncode) if returncode is not None else "unknown",
            "epochs_reported": len(self.history),
            "status": outcome.status,
        }
        if self.history:
            attrs["last_step"] = self.history[-1][0]
            attrs["last_metrics"] = self.history[-1][1]
            attrs["history"] = history_attr(self.history)
        if self.pruned_step is not None:
            attrs["pruned_step"] = self.pruned_step
        if self.over_budget is not None and outcome.state != "COMPLETE":
            attrs["status"] = "over-budget"
            attrs["over_budget"] = self.over_budget
        strays = getattr(self.process, "strays", None)
        if self.resume is not None:
            attrs.update(resume.end_attrs(self.resume))
        if strays:
            # Processes that left the trial's group, found by its token and stopped.
            attrs["strays_stopped"] = list(strays)
        if self.diverged is not None:
            attrs["diverged_step"] = self.diverged[0]
        if outcome.state == "PRUNED":
            # Pruning ends the trial process with its own exit code: say which it is.
            attrs["reason"] = outcome.reason
            attrs["exit"] = f"pruned ({attrs['exit']})"
        if outcome.state == "FAIL":
            attrs["reason"] = (outcome.reason or "")[:2000]
            tail = launch.tail_lines(self.trial_dir / "stderr.log", _STDERR_TAIL_LINES)
            if tail:
                attrs["stderr_tail"] = tail[-_ATTR_TEXT_CHARS:]
            if outcome.traceback:
                attrs["traceback"] = outcome.traceback[-_ATTR_TEXT_CHARS:]
            if machine is not None:
                attrs["machine_failure"] = machine
        self._set_attrs(attrs)
        kill_points.reached("record:before_tell")
        value = outcome.value
        told: float | list[float] | None = (
            list(outcome.values) if self.spec.objective.is_multi else value
        )
        told_trial: Any = None
        with self.study.lock:
            study = self.study.study
            if outcome.state in ("COMPLETE", "PRUNED") and self.spec.objective.constraints:
                # Before the tell, for every sampler: best_trial(s) and the dashboard read
                # them; samplers with a constraints_func read them back at the tell.
                constraints = outcome.constraints
                self.study.db(
                    lambda: store_constraints(self.study.storage, self.trial_id, constraints),
                    "recording",
                )
            # skip_if_finished: a tell retried after an outage may have landed the first time.
            if outcome.state == "COMPLETE":
                told_trial = self.study.db(
                    lambda: tell(study, self.trial, told, skip_if_finished=True), "recording"
                )
            elif outcome.state == "PRUNED":
                told_trial = self.study.db(
                    lambda: tell(
                        study,
                        self.trial,
                        state=retries.trial_state("PRUNED"),
                        skip_if_finished=True,
                    ),
                    "recording",
                )
                value = told_trial.value
            elif outcome.retry or machine_retry:
                if machine_retry and machine is not None:
                    self.study.db(
                        lambda: retries.mark_machine_failure(
                            self.study.storage, self.trial_id, machine
                        ),
                        "recording",
                    )
                self.study.fail_attempt(self.trial_id)
            else:
                told_trial = self.study.db(
                    lambda: tell(
                        study, self.trial, state=retries.trial_state("FAIL"), skip_if_finished=True
                    ),
                    "recording",
                )
        if self.resume is not None:
            resume.on_end(self, outcome)
        self._apply_keep_logs(outcome.state)
        if self.study.budget is not None:
            # After the tell: the study's spent / total with this trial, for the observers.
            with contextlib.suppress(Exception):
                attrs.update(self.study.budget.event_attrs())
        bs = self.attrs.get("batch_size")
        return TrialOutcome(
            number=self.number,
            trial_id=self.trial_id,
            state=outcome.state,
            value=value,
            params=self.params,
            duration_s=duration_s,
            reason=outcome.reason if outcome.state != "COMPLETE" else None,
            interrupted=outcome.retry or machine_retry,
            batch_size=bs if isinstance(bs, int) else None,
            user_attrs={**self.attrs, **attrs},
            values=outcome.values,
            constraints=outcome.constraints,
            machine=machine,
            told=told_trial,
        )

    def _killed_by_cgroup_oom(self, outcome: Outcome, returncode: int | None) -> Outcome:
        """A SIGKILL this worker did not send while the OOM killer of its cgroup (the Slurm
        job's, the pod's) killed a process: say so, a failure of the machine (node_health)."""
        sigkill = (-signal.SIGKILL, 128 + signal.SIGKILL)
        if outcome.state != "FAIL" or outcome.retry or self.timed_out or returncode not in sigkill:
            return outcome
        after = cgroup.oom_kills()
        if self._oom_kills is None or after is None or after <= self._oom_kills:
            return outcome
        reason = f"{outcome.reason}: {node_health.CGROUP_OOM_REASON}"
        return dataclasses.replace(outcome, reason=reason)

    def _machine_failure(self, outcome: Outcome) -> tuple[str | None, bool]:
        """The kind of machine error a FAIL met (:mod:`dvt_hpo.recovery.node_health`), and whether
        its attempt is retried for it (within the machine limit of its chain)."""
        node_failures = self.spec.trials.node_failures
        if outcome.state != "FAIL" or outcome.retry or not node_failures:
            return None, False
        kind = node_health.machine_failure(outcome.reason)
        if kind is None:
            return None, False
        with self.study.lock:
            trial = self.study.db(
                lambda: self.study.storage.get_trial(self.trial_id), "reading the trial"
            )
        return kind, retries.machine_retries(trial) < node_health.machine_retry_limit(node_failures)

    def _apply_keep_logs(self, state: str) -> None:
        """``trials.keep_logs``: a finished trial's folder is removed unless the rule keeps it
        (``all``; ``failed`` keeps FAIL only; ``none`` keeps nothing)."""
        keep = self.spec.trials.keep_logs
        if keep == "all" or (keep == "failed" and state == "FAIL"):
            return
        shutil.rmtree(self.trial_dir, ignore_errors=True)
        self._set_attrs({"log_dir": f"removed (trials.keep_logs={keep})"})

    def _set_attrs(self, attrs: Mapping[str, Any]) -> None:
        import optuna

        with self.study.lock:
            try:
                # One transaction, not one per attr (each a sync of SQLite's log).
                self.study.db(
                    lambda: set_trial_user_attrs(self.study.storage, self.trial_id, attrs),
                    "recording",
                )
            except optuna.exceptions.UpdateFinishedTrialError:
                # Another worker failed it as stale (and retried it): its record stands.
                return


def tell(study: optuna.Study, trial: optuna.Trial, *args: Any, **kwargs: Any) -> Any:
    """``study.tell``, where a sampler's ``study.stop()`` is not an error. The grid sampler
    stops the study when its grid is used up; outside ``Study.optimize`` Optuna raises that as
    a RuntimeError after the trial was recorded. The loop's own budget decides when to stop."""
    try:
        return study.tell(trial, *args, **kwargs)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise
        return storage_of(study).get_trial(trial_id_of(trial))


__all__ = ["MAX_HISTORY_POINTS", "TrialRun", "history_attr", "tell"]
