"""The study loop: ask -> sample -> launch -> stream reports -> tell, with stopping rules.

Layers (torchelastic-style): the CLI builds a :class:`~dvt_hpo.spec.StudySpec`; the
:class:`StudyRunner` supervises; each :class:`TrialRun` owns one trial's process group and
control socket. The orchestrator never imports torch: trials run in their own processes.

A trial's states, as the orchestrator sees them::

    asked -> launched -> (reporting)* -> COMPLETE | PRUNED | FAIL
                                         FAIL(interrupted | stale) -> WAITING copy (retry)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import queue
import shutil
import signal
import socket
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dvt_hpo import launch, space
from dvt_hpo.exceptions import DvtHpoError, SpecError
from dvt_hpo.protocol import ControlServer
from dvt_hpo.storage import (
    HeartbeatSettings,
    open_storage,
    redact_url,
    retry_callback,
    supports_heartbeat,
)

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec import StudySpec

BUILTIN_ENTRYPOINT = "dvt_hpo.train:run"
_ATTR_PREFIX = "dvt_hpo:"
_CACHE_PREFIX = "dvt_hpo:batch_size_cache:"
_HEARTBEAT_ATTR = "dvt_hpo:heartbeat"
_OVER_BUDGET_ATTR = "dvt_hpo:over_budget"
# Exit code of a run stopped by Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130


class StudyStopped(DvtHpoError):
    """The study stopped itself (e.g. ``study.max_failures`` reached): exit code 1."""


@dataclass
class TrialOutcome:
    number: int
    state: str  # COMPLETE | PRUNED | FAIL
    value: float | None
    params: dict[str, Any]
    duration_s: float
    reason: str | None = None
    interrupted: bool = False
    batch_size: int | None = None


@dataclass
class _Counts:
    finished: int = 0
    failed: int = 0
    by_state: dict[str, int] = field(default_factory=dict)


def _fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _fmt_params(params: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={_fmt_value(v)}" for k, v in params.items())


def reduce_history(
    history: list[tuple[int, dict[str, float]]], metric: str, direction: str, reduce: str
) -> float | None:
    """The objective value from the per-step history: ``best`` (direction-aware) or ``last``."""
    values = [m[metric] for _, m in history if metric in m and m[metric] is not None]
    values = [float(v) for v in values if not (isinstance(v, float) and math.isnan(v))]
    if not values:
        return None
    if reduce == "last":
        return values[-1]
    return max(values) if direction == "maximize" else min(values)


def cache_key(config: Mapping[str, Any], keys: tuple[str, ...], extra: Mapping[str, Any]) -> str:
    """Hash of the config values that decide a trial's memory footprint."""
    values: dict[str, Any] = {}
    for path in keys:
        try:
            values[path] = space.get_path(config, path)
        except (KeyError, IndexError, AttributeError):
            values[path] = None
    blob = json.dumps({"keys": values, "extra": extra}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


class TrialRun:
    """One trial: its payload, process group, control socket and the reports it streams.

    Implements the control server's handler; the report callbacks run on the server's reader
    thread, so everything they touch is guarded by the runner's study lock.
    """

    def __init__(
        self,
        runner: StudyRunner,
        trial: optuna.Trial,
        params: dict[str, Any],
        config: dict[str, Any],
        slot: launch.Slot,
    ) -> None:
        self.runner = runner
        self.spec = runner.spec
        self.trial = trial
        self.number = trial.number
        self.params = params
        self.config = config
        self.slot = slot
        self.history: list[tuple[int, dict[str, float]]] = []
        self.pruned_step: int | None = None
        self.attrs: dict[str, Any] = {}
        self.hosts: dict[int, str] = {}
        self.stop_event = threading.Event()
        self.interrupted = False
        self.timed_out = False
        self.process: launch.TrialProcess | None = None
        self.start_time = time.monotonic()
        self.trial_dir = runner.runs_dir / f"trial-{self.number:04d}"
        self.thread = threading.Thread(
            target=self._run_safely, name=f"trial-{self.number}", daemon=True
        )
        self.decision_times: list[float] = []

    # -- control-socket handler (called on the server's threads) --------------------------
    def on_hello(self, rank: int, pid: int, host: str) -> None:
        self.hosts[rank] = host

    def on_report(self, step: int, metrics: dict[str, float]) -> bool:
        received = time.perf_counter()
        metric = self.spec.objective.metric
        self.history.append((int(step), dict(metrics)))
        prune = False
        if self.pruned_step is not None:
            return True
        value = metrics.get(metric)
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            with self.runner.study_lock:
                self.trial.report(float(value), int(step))
                prune = self.trial.should_prune()
        if prune:
            self.pruned_step = int(step)
            self.stop_event.set()
        self.decision_times.append(time.perf_counter() - received)
        return prune

    def on_attrs(self, attrs: dict[str, Any]) -> None:
        self.attrs.update(attrs)
        with self.runner.study_lock:
            for key, value in attrs.items():
                self.trial.set_user_attr(key, value)

    def on_cache_get(self, key: str) -> dict[str, Any] | None:
        return self.runner.cache_get(key)

    def on_cache_put(self, key: str, value: dict[str, Any]) -> None:
        self.runner.cache_put(key, value)

    # -- life -------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def interrupt(self) -> None:
        self.interrupted = True
        self.stop_event.set()

    def _payload(self) -> dict[str, Any]:
        bs = self.spec.batch_size
        precision = self.config.get("precision", {}) if isinstance(self.config, dict) else {}
        return {
            "protocol": 1,
            "study_name": self.spec.study.name,
            "trial_number": self.number,
            "entrypoint": self.spec.trainer.entrypoint,
            "config": self.config,
            "params": self.params,
            "batch_size": {
                "auto": bs.auto,
                "path": bs.path,
                "min": bs.min,
                "max": bs.max,
                "start": bs.start if bs.start is not None else bs.min,
                "multiple_of": bs.multiple_of,
                "tolerance": bs.tolerance,
                "effective": bs.effective,
                "accumulate_path": bs.accumulate_path,
                "cache_key": cache_key(
                    self.config,
                    bs.memory_keys,
                    {
                        "entrypoint": self.spec.trainer.entrypoint,
                        "precision": precision,
                        "launcher": self.spec.trials.launcher,
                        "nproc": self.spec.trials.nproc_per_node,
                        "memory_limit": self.spec.trials.memory_limit,
                    },
                ),
            },
            "report_timeout_s": self.spec.trials.report_timeout_s,
            "trial_dir": str(self.trial_dir),
        }

    def _run_safely(self) -> None:
        try:
            outcome = self._run()
        except BaseException as exc:  # noqa: BLE001 - a bug here must not hang the study
            outcome = self._finish_failed(f"orchestrator error: {type(exc).__name__}: {exc}")
        self.runner.events.put(outcome)

    def _run(self) -> TrialOutcome:
        spec = self.spec
        if self.trial_dir.exists():
            shutil.rmtree(self.trial_dir)
        self.trial_dir.mkdir(parents=True)
        payload_path = self.trial_dir / "payload.json"
        _write_json_atomic(payload_path, self._payload())

        with ControlServer(None, self) as server:
            argv = launch.build_command(
                spec.trials.launcher, payload_path, nproc_per_node=spec.trials.nproc_per_node
            )
            env = launch.trial_env(
                self.runner.child_env, self.slot, server.path, spec.trials.memory_limit
            )
            self.process = launch.TrialProcess.start(
                argv,
                env=env,
                cwd=spec.path.parent,
                stdout_path=self.trial_dir / "stdout.log",
                stderr_path=self.trial_dir / "stderr.log",
            )
            with self.runner.study_lock:
                self.trial.set_user_attr("log_dir", str(self.trial_dir))
                self.trial.set_user_attr("host", socket.gethostname())
                if self.slot.cuda_visible_devices is not None:
                    self.trial.set_user_attr("devices", self.slot.cuda_visible_devices)
            waiter = threading.Thread(
                target=self._wait_exit, name=f"trial-{self.number}-wait", daemon=True
            )
            waiter.start()
            if not self.stop_event.wait(spec.trials.timeout_s):
                self.timed_out = True
            if self.pruned_step is not None and self.process.poll() is None:
                # The chief raises TrialPruned on the decision and exits on its own; a signal
                # now would turn its clean "pruned" into "stopped". The grace bounds the wait.
                self.process.wait(spec.trials.stop_grace_s)
            if self.process.poll() is None:
                self.process.stop(spec.trials.stop_grace_s)
            returncode = self.process.wait(None)
            # The last reports and attrs may still be in flight on the socket.
            server.drain(timeout_s=5)
        return self._conclude(returncode)

    def _wait_exit(self) -> None:
        assert self.process is not None
        self.process.wait(None)
        self.stop_event.set()

    def _conclude(self, returncode: int | None) -> TrialOutcome:
        spec = self.spec
        result = _read_json(self.trial_dir / "result.json")
        duration_s = time.monotonic() - self.start_time
        attrs: dict[str, Any] = {
            "duration_s": round(duration_s, 3),
            "exit": launch.describe_exit(returncode) if returncode is not None else "unknown",
            "epochs_reported": len(self.history),
        }
        if self.history:
            attrs["last_metrics"] = self.history[-1][1]
        if result and result.get("status") == "ok" and result.get("metrics"):
            attrs["final_metrics"] = result["metrics"]
        self._set_attrs(attrs)

        if self.pruned_step is not None:
            self._set_attrs({"status": "pruned", "pruned_step": self.pruned_step})
            with self.runner.study_lock:
                frozen = self.runner.study.tell(self.trial, state=_state("PRUNED"))
            return self._outcome("PRUNED", frozen.value, duration_s)
        if self.interrupted:
            return self._finish_failed("interrupted (the study was stopped)", interrupted=True)
        if self.timed_out:
            return self._finish_failed(
                f"timed out after trials.timeout_s={spec.trials.timeout_s:g} s"
            )

        error = _first_error(result, self.trial_dir)
        if error is not None:
            reason = f"{error.get('exc_type', 'Error')}: {error.get('message', '')}".strip()
            if error.get("rank", 0):
                reason = f"rank {error['rank']}: {reason}"
            if spec.trials.memory_limit and _is_memory_error(error):
                reason += f" (trials.memory_limit={spec.trials.memory_limit} bytes)"
            return self._finish_failed(reason, traceback=error.get("traceback"))
        if returncode != 0 or result is None or result.get("status") != "ok":
            return self._finish_failed(
                f"trial process ended with {launch.describe_exit(returncode)}"
                if returncode != 0
                else "trial process exited without writing a result"
            )

        history = list(self.history)
        if not history and isinstance(result.get("metrics"), dict):
            history = [(0, result["metrics"])]
        metric = spec.objective.metric
        value = reduce_history(history, metric, spec.objective.direction, spec.objective.reduce)
        if value is None:
            reported = sorted({k for _, m in history for k in m})
            return self._finish_failed(
                f"objective.metric {metric!r} was never reported; the trial reported "
                f"{reported if reported else 'no metrics'}"
            )
        self._set_attrs({"status": "ok"})
        with self.runner.study_lock:
            self.runner.study.tell(self.trial, value)
        return self._outcome("COMPLETE", value, duration_s)

    def _finish_failed(
        self, reason: str, *, interrupted: bool = False, traceback: str | None = None
    ) -> TrialOutcome:
        duration_s = time.monotonic() - self.start_time
        attrs: dict[str, Any] = {
            "status": "interrupted" if interrupted else ("timeout" if self.timed_out else "failed"),
            "reason": reason[:2000],
        }
        stderr_tail = launch.tail_lines(self.trial_dir / "stderr.log", 50)
        if stderr_tail:
            attrs["stderr_tail"] = stderr_tail[-8000:]
        if traceback:
            attrs["traceback"] = traceback[-8000:]
        self._set_attrs(attrs)
        with self.runner.study_lock:
            frozen = self.runner.study.tell(self.trial, state=_state("FAIL"), skip_if_finished=True)
            if interrupted:
                # The same callback Optuna runs for heartbeat-stale trials: a WAITING copy with
                # the same params, picked up by the next `ask` of any worker.
                retry_callback(self.spec.trials.max_retries)(self.runner.study, frozen)
        return self._outcome("FAIL", None, duration_s, reason=reason, interrupted=interrupted)

    def _set_attrs(self, attrs: Mapping[str, Any]) -> None:
        with self.runner.study_lock:
            for key, value in attrs.items():
                self.trial.set_user_attr(key, value)

    def _outcome(
        self,
        state: str,
        value: float | None,
        duration_s: float,
        *,
        reason: str | None = None,
        interrupted: bool = False,
    ) -> TrialOutcome:
        bs = self.attrs.get("batch_size")
        return TrialOutcome(
            number=self.number,
            state=state,
            value=value,
            params=self.params,
            duration_s=duration_s,
            reason=reason,
            interrupted=interrupted,
            batch_size=bs if isinstance(bs, int) else None,
        )


def _state(name: str) -> Any:
    from optuna.trial import TrialState

    return TrialState[name]


def _is_memory_error(error: Mapping[str, Any]) -> bool:
    from dvt_hpo.batch_size import is_out_of_memory

    exc_type = str(error.get("exc_type", ""))
    if exc_type.endswith("MemoryError") or exc_type.endswith("OutOfMemoryError"):
        return True
    return is_out_of_memory(RuntimeError(str(error.get("message", ""))))


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _first_error(result: dict[str, Any] | None, trial_dir: Path) -> dict[str, Any] | None:
    """The earliest error of any rank: under DDP the chief often fails only because another
    rank died first, and the first failure is the cause."""
    errors = [result] if result and result.get("status") == "error" else []
    for path in sorted(trial_dir.glob("error-rank*.json")):
        data = _read_json(path)
        if data is not None and data.get("status", "error") == "error":
            errors.append(data)
    if not errors:
        return None
    return min(errors, key=lambda e: float(e.get("time_unix", float("inf"))))


class StudyRunner:
    """Runs a study described by a :class:`StudySpec` until its budget or a stopping rule."""

    def __init__(
        self,
        spec: StudySpec,
        *,
        allow_space_change: bool = False,
        out: Callable[[str], None] | None = None,
    ) -> None:
        self.spec = spec
        self.allow_space_change = allow_space_change
        self.out = out or (lambda line: print(line, flush=True))
        self.study_lock = threading.RLock()
        self.events: queue.Queue[TrialOutcome] = queue.Queue()
        self.running: dict[int, TrialRun] = {}
        self.runs_dir = spec.trials.runs_dir or (spec.path.parent / "runs" / spec.study.name)
        self.child_env = _child_env(spec)
        self.study: optuna.Study
        self.storage: Any
        self._stop_heartbeat = threading.Event()
        self.outcomes: list[TrialOutcome] = []

    # -- study setup --------------------------------------------------------------------
    def open_study(self) -> optuna.Study:
        import optuna

        from dvt_hpo.spec import build_pruner, build_sampler

        spec = self.spec
        grace = spec.study.grace_period_s or 2 * spec.study.heartbeat_interval_s
        self.storage = open_storage(
            spec.study.storage,
            HeartbeatSettings(spec.study.heartbeat_interval_s, grace, spec.trials.max_retries),
        )
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        # We drive heartbeats ourselves around ask/tell (Optuna warns that they are meant for
        # Study.optimize) and use fail_stale_trials knowingly (marked experimental).
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
        warnings.filterwarnings("ignore", message=".*fail_stale_trials is experimental")
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        study = optuna.create_study(
            storage=self.storage,
            study_name=spec.study.name,
            direction=spec.objective.direction,
            load_if_exists=True,
        )
        if study.direction.name.lower() != spec.objective.direction:
            raise SpecError(
                f"the stored study {spec.study.name!r} maximizes/minimizes differently: it is "
                f"{study.direction.name.lower()}, the file says {spec.objective.direction!r}; "
                "use another study.name",
                file=spec.path,
                field="objective.direction",
            )
        self._check_space(study)
        existing = len(study.get_trials(deepcopy=False))
        study.sampler = build_sampler(
            spec.study.sampler,
            spec.search_space,
            seed_offset=existing,
            parallel=spec.trials.parallel,
        )
        study.pruner = build_pruner(spec.study.pruner)
        with contextlib.suppress(Exception):
            study.set_metric_names([spec.objective.metric])
        self.study = study
        self.study_id = self.storage.get_study_id_from_name(spec.study.name)
        self._reconcile()
        return study

    def _check_space(self, study: optuna.Study) -> None:
        spec = self.spec
        signature = space.space_signature(spec.search_space)
        attrs = study.user_attrs
        stored = attrs.get(_ATTR_PREFIX + "space")
        if stored is not None and stored != signature:
            differences = space.diff_spaces(stored, signature)
            if not self.allow_space_change:
                raise SpecError(
                    "the search space differs from the one stored in study "
                    f"{spec.study.name!r}: "
                    + "; ".join(differences)
                    + ". Rerun with --allow-space-change to accept it, or use another study.name",
                    file=spec.path,
                    field="search_space",
                )
            self.out("search space changed: " + "; ".join(differences))
        settings = {
            "space": signature,
            "sampler": {"kind": spec.study.sampler.kind, **spec.study.sampler.kwargs},
            "pruner": {"kind": spec.study.pruner.kind, **spec.study.pruner.kwargs},
            "objective": {
                "metric": spec.objective.metric,
                "direction": spec.objective.direction,
                "reduce": spec.objective.reduce,
            },
        }
        for key, value in settings.items():
            old = attrs.get(_ATTR_PREFIX + key)
            if old is not None and old != value and key != "space":
                self.out(f"note: {key} settings changed from {old} to {value}")
            if old != value:
                study.set_user_attr(_ATTR_PREFIX + key, value)

    # -- batch-size cache (study-level system attrs, shared by all workers) --------------
    def cache_get(self, key: str) -> dict[str, Any] | None:
        with self.study_lock:
            value = self.storage.get_study_system_attrs(self.study_id).get(_CACHE_PREFIX + key)
        return value if isinstance(value, dict) else None

    def cache_put(self, key: str, value: dict[str, Any]) -> None:
        with self.study_lock:
            self.storage.set_study_system_attr(self.study_id, _CACHE_PREFIX + key, value)

    # -- budget and reconciliation ------------------------------------------------------
    def _reconcile(self) -> None:
        """Fail trials whose orchestrator died (stale heartbeat) and re-enqueue their params.

        RDB storages use Optuna's own heartbeat table and retry callback. Optuna's journal
        storage has no heartbeat, so for it the same rule runs here on a trial system attr.
        """
        import optuna

        if supports_heartbeat(self.storage):
            with self.study_lock:
                optuna.storages.fail_stale_trials(self.study)
            return
        grace_s = self.spec.study.grace_period_s or 2 * self.spec.study.heartbeat_interval_s
        now = time.time()
        running = self.study.get_trials(deepcopy=False, states=(_state("RUNNING"),))
        for t in running:
            if t.number in self.running:
                continue
            beat = t.system_attrs.get(_HEARTBEAT_ATTR)
            if beat is None and t.datetime_start is not None:
                beat = t.datetime_start.timestamp()
            if beat is None or now - float(beat) <= grace_s:
                continue
            with self.study_lock:
                try:
                    failed = self.storage.set_trial_state_values(t._trial_id, _state("FAIL"))
                except optuna.exceptions.UpdateFinishedTrialError:
                    failed = False  # another worker got there first
                if failed:
                    frozen = self.storage.get_trial(t._trial_id)
                    retry_callback(self.spec.trials.max_retries)(self.study, frozen)

    def _beat(self, trial_id: int) -> None:
        if supports_heartbeat(self.storage):
            self.storage.record_heartbeat(trial_id)
        else:
            self.storage.set_trial_system_attr(trial_id, _HEARTBEAT_ATTR, time.time())

    def budget(self) -> tuple[int, int, int]:
        """``(used, waiting, foreign_running)`` of the study right now.

        ``used`` counts towards ``study.n_trials``: every trial except FAILs that a retry
        superseded (the WAITING/RUNNING/finished copy counts instead). ``waiting`` are enqueued
        retries, which are run even when the budget is used up (they are counted already).
        ``foreign_running`` are RUNNING trials of other workers, or of a dead orchestrator
        whose heartbeat has not gone stale yet.
        """
        with self.study_lock:
            trials = self.study.get_trials(deepcopy=False)
        used = waiting = foreign = 0
        for t in _counted(trials):
            state = t.state.name
            used += 1
            if state == "WAITING":
                waiting += 1
            elif state == "RUNNING" and t.number not in self.running:
                foreign += 1
        return used, waiting, foreign

    def budget_used(self) -> int:
        return self.budget()[0]

    def _heartbeat_loop(self) -> None:
        interval_s = self.spec.study.heartbeat_interval_s
        while not self._stop_heartbeat.wait(interval_s):
            for run in list(self.running.values()):
                with contextlib.suppress(Exception), self.study_lock:
                    self._beat(run.trial._trial_id)
            with contextlib.suppress(Exception):
                self._reconcile()

    # -- the loop -----------------------------------------------------------------------
    def run(self) -> optuna.Study:
        spec = self.spec
        self.open_study()
        n_trials = spec.study.n_trials
        used, waiting, foreign = self.budget()
        where = redact_url(spec.study.storage)
        if n_trials is not None and used >= n_trials and not waiting and not foreign:
            self.out(
                f"study {spec.study.name!r} ({where}) already has {used}/{n_trials} trials; "
                "nothing to run"
            )
            self.print_summary()
            return self.study
        self.out(
            f"study {spec.study.name!r} on {where}: "
            + (f"{used}/{n_trials} trials done, " if n_trials else "")
            + f"{spec.trials.parallel} at a time"
        )
        self.out(f"watch it: optuna-dashboard {where}")
        if spec.tracking.mlflow is not None:
            self.out("note: tracking.mlflow is validated but not recorded yet (a later release)")
        slots = launch.split_devices(
            spec.trials.devices, spec.trials.parallel, nproc_per_node=spec.trials.nproc_per_node
        )
        free_slots = list(slots)
        heartbeat = threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True)
        heartbeat.start()
        deadline = (
            time.monotonic() + spec.study.timeout_s if spec.study.timeout_s is not None else None
        )
        max_failures = self._max_failures()
        failures = 0
        launching = True
        stop_message: str | None = None
        previous_handlers = _install_stop_signals()
        try:
            while True:
                if launching and deadline is not None and time.monotonic() >= deadline:
                    launching = False
                    self.out(f"study.timeout_s={spec.study.timeout_s:g} reached: no new trials")
                foreign = 0
                while launching and free_slots:
                    used, waiting, foreign = self.budget()
                    if n_trials is not None and used >= n_trials and not waiting:
                        break
                    slot = free_slots.pop(0)
                    if not self._launch(slot):
                        free_slots.append(slot)
                if not self.running and not (launching and foreign):
                    # Trials of a dead orchestrator stay RUNNING until their heartbeat goes
                    # stale; waiting for them lets this worker retry them instead of leaving.
                    break
                # Bounded, so that retries enqueued by the heartbeat reconciliation (and the
                # study deadline) are noticed while trials run.
                wait_s = float(spec.study.heartbeat_interval_s)
                if launching and deadline is not None:
                    wait_s = min(wait_s, max(0.0, deadline - time.monotonic()))
                try:
                    outcome = self.events.get(timeout=wait_s)
                except queue.Empty:
                    continue
                run = self.running.pop(outcome.number)
                free_slots.append(run.slot)
                self._record(outcome)
                if outcome.state == "FAIL" and not outcome.interrupted:
                    failures += 1
                    if max_failures is not None and failures >= max_failures and launching:
                        launching = False
                        stop_message = (
                            f"stopping: {failures} trials failed in this run, reaching "
                            f"study.max_failures={spec.study.max_failures}; last reason: "
                            f"{outcome.reason}"
                        )
                        self.out(stop_message)
        except KeyboardInterrupt:
            self._interrupt()
            raise
        finally:
            for signum, handler in previous_handlers.items():
                signal.signal(signum, handler)
            self._stop_heartbeat.set()
        self.print_summary()
        if stop_message is not None:
            raise StudyStopped(stop_message)
        return self.study

    def _max_failures(self) -> int | None:
        mf = self.spec.study.max_failures
        if mf is None:
            return None
        if isinstance(mf, float) and mf < 1:
            total = self.spec.study.n_trials
            if total is None:
                return None
            return max(1, math.ceil(mf * total))
        return int(mf)

    def _launch(self, slot: launch.Slot) -> bool:
        """Ask for a trial and start it in ``slot``; False when the study's budget turned out
        to be used up by another worker between our count and our ask."""
        spec = self.spec
        with self.study_lock:
            trial = self.study.ask()
            trial_id = trial._trial_id  # Optuna exposes no public id; storages need it
            # A RUNNING trial without a heartbeat is never found stale: record one at once.
            self._beat(trial_id)
            system_attrs = self.storage.get_trial_system_attrs(trial_id)
            retried = system_attrs.get("failed_trial")
            if retried is None and self._over_budget(trial.number):
                # Storages number trials atomically, so "the first n_trials count" is exact
                # across workers; the extra one is closed at once and never counted.
                self.storage.set_trial_system_attr(trial_id, _OVER_BUDGET_ATTR, True)
                trial.set_user_attr("status", "over-budget")
                trial.set_user_attr(
                    "reason", "another worker took the last trial of study.n_trials first"
                )
                self.study.tell(trial, state=_state("FAIL"))
                return False
            params = space.sample(trial, spec.search_space)
        config = space.apply(spec.trainer.config, spec.search_space, params)
        if spec.trainer.entrypoint == BUILTIN_ENTRYPOINT:
            config.setdefault("checkpoint", {})["enable_checkpointing"] = False
            config["output_dir"] = str(self.runs_dir / f"trial-{trial.number:04d}" / "output")
        elif _has_path(config, "checkpoint.enable_checkpointing"):
            space.set_path(config, "checkpoint.enable_checkpointing", False)
        if retried is not None:
            trial.set_user_attr("retry_of", retried)
        run = TrialRun(self, trial, params, config, slot)
        self.running[trial.number] = run
        run.start()
        return True

    def _over_budget(self, number: int) -> bool:
        n_trials = self.spec.study.n_trials
        if n_trials is None:
            return False
        earlier = [t for t in self.study.get_trials(deepcopy=False) if t.number < number]
        return _count_budget(earlier) >= n_trials

    def _interrupt(self) -> None:
        if not self.running:
            return
        self.out(f"interrupted: stopping {len(self.running)} running trial(s)")
        for run in self.running.values():
            run.interrupt()
        # Later signals are ignored (_install_stop_signals): the trials are being recorded for
        # a retry.
        while self.running:
            outcome = self.events.get()
            self.running.pop(outcome.number, None)
            self._record(outcome)

    def _record(self, outcome: TrialOutcome) -> None:
        self.outcomes.append(outcome)
        metric = self.spec.objective.metric
        value = f"{metric}={outcome.value:.4f}" if outcome.value is not None else ""
        extra = f" batch={outcome.batch_size}" if outcome.batch_size else ""
        reason = f" reason: {outcome.reason}" if outcome.reason else ""
        self.out(
            f"trial {outcome.number:>3} {outcome.state:<8} {value:<18} "
            f"{outcome.duration_s:6.1f}s  {_fmt_params(outcome.params)}{extra}{reason}"
        )

    def print_summary(self) -> None:
        trials = self.study.get_trials(deepcopy=False)
        counts: dict[str, int] = {}
        counted = {t.number for t in _counted(trials)}
        for t in trials:
            if t.system_attrs.get(_OVER_BUDGET_ATTR):
                state = "over budget (not counted)"
            elif t.number not in counted:
                state = "failed and retried"
            else:
                state = t.state.name.lower()
            counts[state] = counts.get(state, 0) + 1
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        self.out(f"trials: {summary or 'none'}")
        complete = [t for t in trials if t.state.name == "COMPLETE"]
        if complete:
            best = self.study.best_trial
            self.out(
                f"best trial {best.number}: {self.spec.objective.metric}={best.value:.4f}  "
                f"{_fmt_params(best.params)}"
            )


def _counted(trials: list[Any]) -> list[Any]:
    """The trials that count towards ``study.n_trials``: all but FAILs superseded by a retry
    and trials closed as over budget."""
    superseded: set[int] = set()
    for t in trials:
        superseded.update(t.system_attrs.get("retry_history", []))
    return [
        t
        for t in trials
        if not t.system_attrs.get(_OVER_BUDGET_ATTR)
        and not (t.state.name == "FAIL" and t.number in superseded)
    ]


def _count_budget(trials: list[Any]) -> int:
    return len(_counted(trials))


def _has_path(config: Any, path: str) -> bool:
    try:
        space.get_path(config, path)
    except (KeyError, IndexError, AttributeError, TypeError):
        return False
    return True


def _child_env(spec: StudySpec) -> dict[str, str]:
    env = dict(os.environ)
    # Entry points next to the study file import without installing them.
    extra = [str(spec.path.parent), os.getcwd()]
    if env.get("PYTHONPATH"):
        extra.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(extra)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _install_stop_signals() -> dict[int, Any]:
    """Make the first SIGINT or SIGTERM raise KeyboardInterrupt and ignore any later one, so
    that the trials being stopped are recorded (FAIL interrupted + a WAITING copy) before the
    exit. Returns the previous handlers (none outside the main thread)."""

    def handler(signum: int, frame: Any) -> None:
        for stop_signal in (signal.SIGINT, signal.SIGTERM):
            signal.signal(stop_signal, signal.SIG_IGN)
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}


def run_study(
    path: str | os.PathLike[str],
    overrides: tuple[str, ...] | list[str] = (),
    *,
    allow_space_change: bool = False,
    out: Callable[[str], None] | None = None,
) -> optuna.Study:
    """Run (or resume) the study of a study.yaml file; returns the Optuna study.

    The same as ``dvt-hpo run PATH --set ...``, for notebooks and scripts.
    """
    from dvt_hpo.spec import load_spec

    spec = load_spec(path, overrides, check_runnable=True)
    return StudyRunner(spec, allow_space_change=allow_space_change, out=out).run()


def best_config(spec: StudySpec, study: optuna.Study) -> dict[str, Any]:
    """The full trainer config of the best trial, with its found batch size and checkpointing
    back on, ready for ``dvt-hpo train``."""
    best = study.best_trial
    params = {d.name: best.params[d.name] for d in spec.search_space if d.name in best.params}
    config = space.apply(spec.trainer.config, spec.search_space, params)
    bs = best.user_attrs.get("batch_size")
    if spec.batch_size.auto and isinstance(bs, int):
        space.set_path(config, spec.batch_size.path, bs, create=True)
        acc = best.user_attrs.get("accumulate_steps")
        if isinstance(acc, int) and _has_path(config, spec.batch_size.accumulate_path):
            space.set_path(config, spec.batch_size.accumulate_path, acc)
    if _has_path(config, "checkpoint.enable_checkpointing"):
        space.set_path(config, "checkpoint.enable_checkpointing", True)
    return config


__all__ = ["StudyRunner", "StudyStopped", "TrialOutcome", "run_study", "best_config"]
