"""MLflow runs of a study: a parent run per study, a nested run per trial.

Every MLflow call happens on one background thread fed by a queue, in event order, so the study
loop and its pruning decisions never wait for a tracking server. The only wait is bounded:
``trial_started`` gives the new run's id up to ``id_wait_s`` to come back, so that it lands in
the trial's user attrs before the trial starts; later than that, the writer thread writes it on the
trial through the study's storage itself. A tracking server that fails (gone, refusing, slow
past MLflow's retries) costs one warning line and turns tracking off for the rest of the run;
the study goes on.

Resume finds the same parent run: its id is a study user attr (``mlflow_parent_run_id``) when
the observer is given the Optuna study, else the run tagged with the study's name and storage.

The parent's ``best_value`` is the study's best: MLflow shows a metric's value at its highest
step, so each improvement is logged one step above the last (never at the trial's number: with
trials finishing out of order that showed an older, worse value), and a resumed run takes the
study's own best (feasible, one objective) as its baseline and logs it again, rather than
trusting what the parent run shows.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dvt_hpo.exceptions import DvtHpoError
from dvt_hpo.optuna_api.private import storage_of
from dvt_hpo.results.events import (
    BaseObserver,
    StudyEnded,
    StudyStarted,
    TrialFinished,
    TrialReported,
    TrialStarted,
)

if TYPE_CHECKING:
    import optuna

PARENT_ATTR = "mlflow_parent_run_id"
RUN_ID_ATTR = "mlflow_run_id"
TAG_STUDY = "dvt_hpo.study"
TAG_STORAGE = "dvt_hpo.store.storage"
TAG_TRIAL = "dvt_hpo.trial"
TAG_RETRY_OF = "dvt_hpo.retry_of"
TAG_STATE = "dvt_hpo.state"
TAG_REASON = "dvt_hpo.reason"
# Trial outcome -> MLflow run status.
_STATUS = {"COMPLETE": "FINISHED", "PRUNED": "KILLED", "FAIL": "FAILED"}
# User attrs worth a param on the trial's run (the batch-size search's result).
_ATTR_PARAMS = (
    "batch_size",
    "batch_size_found",
    "batch_size_probes",
    "batch_size_probe_sizes",
    "batch_size_cache",
    "host",
    "devices",
    "log_dir",
    "exit",
)
_ATTR_METRICS = ("duration_s", "batch_size_probe_s", "epochs_reported")
# MLflow's defaults retry a dead server for minutes; a study has better things to do.
_HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}
_BAD_KEY_CHARS = re.compile(r"[^A-Za-z0-9_\-. /]")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"]+")
_PARAM_MAX = 6000  # MLflow's limit on a param value


def import_mlflow() -> Any:
    try:
        import mlflow
    except ImportError:
        raise DvtHpoError(
            "tracking.mlflow is set but MLflow is not installed: pip install 'dvt-hpo[mlflow]'"
        ) from None
    return mlflow


def _key(name: str) -> str:
    return _BAD_KEY_CHARS.sub("_", name)


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:_PARAM_MAX]


def redact_text(text: str) -> str:
    """``text`` with the password of every URL in it replaced (a study file's storage URL)."""
    from dvt_hpo.text.redact import redact_url

    return _URL.sub(lambda m: redact_url(m.group(0)), text)


_WRITER_THREAD = "dvt-hpo-mlflow"
# Their retry and setup messages would be several lines per failure on the orchestrator's
# stderr; the one warning line of _fail says it all.
_QUIETED_LOGGERS = ("urllib3.connectionpool", "mlflow")
# MLflow's INFO lines ("Creating initial MLflow database tables...", alembic's migrations) are
# noise in a run's output: these loggers (and their children) keep warnings and errors only.
_INFO_OFF = ("mlflow", "alembic")


def _quiet_on_writer(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR or threading.current_thread().name != _WRITER_THREAD


def _warn_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class MlflowObserver(BaseObserver):
    """Records a study in MLflow. ``study`` (the Optuna study) lets the observer keep the
    parent run's id in the study and write run ids the loop did not wait for."""

    def __init__(
        self,
        tracking_uri: str | None,
        experiment: str | None = None,
        *,
        run_name: str | None = None,
        tags: dict[str, str] | None = None,
        study: optuna.Study | None = None,
        id_wait_s: float = 2.0,
        warn: Callable[[str], None] = _warn_stderr,
    ) -> None:
        import_mlflow()
        for name, value in _HTTP_DEFAULTS.items():
            os.environ.setdefault(name, value)
        for name in _INFO_OFF:
            logger = logging.getLogger(name)
            if logger.getEffectiveLevel() < logging.WARNING:
                logger.setLevel(logging.WARNING)
        for name in _QUIETED_LOGGERS:
            logger = logging.getLogger(name)
            # A logger's filter sees only its own records; its handlers see its children's too.
            for target in (logger, *logger.handlers):
                if _quiet_on_writer not in target.filters:
                    target.addFilter(_quiet_on_writer)
        from mlflow.tracking import MlflowClient

        from dvt_hpo.text.redact import redact_url

        self.tracking_uri = tracking_uri
        self.shown_uri = redact_url(tracking_uri) if tracking_uri else "the default MLflow store"
        self.experiment = experiment
        self.run_name = run_name
        self.tags = dict(tags or {})
        self.study = study
        self.id_wait_s = id_wait_s
        self.warn = warn
        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.parent_id: str | None = None
        self.experiment_id: str | None = None
        self.run_ids: dict[int, str] = {}
        self._late: set[int] = set()  # trials whose run id came after trial_started returned
        self._lock = threading.Lock()
        self._id_ready: dict[int, threading.Event] = {}
        self._direction = "minimize"
        self._metric = "value"
        self._best: float | None = None
        self._best_step = 0  # best_value's next step: one more per improvement
        self._broken: str | None = None
        self._queue: queue.Queue[tuple[Callable[..., None], tuple[Any, ...]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._work, name=_WRITER_THREAD, daemon=True)
        self._thread.start()

    # -- the writer thread -------------------------------------------------------------------
    @property
    def broken(self) -> str | None:
        """Why tracking stopped, or None while it works."""
        return self._broken

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                fn, args = job
                if self._broken is None:
                    try:
                        fn(*args)
                    except Exception as exc:  # noqa: BLE001 - any tracking failure
                        self._fail(exc)
            finally:
                self._queue.task_done()

    def _fail(self, exc: BaseException) -> None:
        first = (str(exc).strip().splitlines() or [""])[0]
        first = redact_text(first)
        self._broken = f"{type(exc).__name__}: {first[:200]}{'...' if len(first) > 200 else ''}"
        for event in self._id_ready.values():
            event.set()
        self.warn(
            f"warning: MLflow tracking at {self.shown_uri} failed ({self._broken}); "
            "the study goes on without it"
        )

    def _put(self, fn: Callable[..., None], *args: Any) -> None:
        if self._broken is None:
            self._queue.put((fn, args))

    # -- events -----------------------------------------------------------------------
    def study_started(self, event: StudyStarted) -> None:
        self._direction = event.direction
        self._metric = event.metric
        self._put(self._open_parent, event)

    def trial_started(self, event: TrialStarted) -> dict[str, Any] | None:
        if self._broken is not None:
            return None
        ready = self._id_ready.setdefault(event.number, threading.Event())
        self._put(self._open_trial, event)
        ready.wait(self.id_wait_s)
        with self._lock:
            if event.number in self.run_ids:
                return {RUN_ID_ATTR: self.run_ids[event.number]}
            self._late.add(event.number)
        return None

    def trial_reported(self, event: TrialReported) -> None:
        self._put(self._log_report, event, int(time.time() * 1000))

    def trial_finished(self, event: TrialFinished) -> None:
        self._put(self._close_trial, event, int(time.time() * 1000))

    def study_ended(self, event: StudyEnded) -> None:
        self._put(self._close_parent, event)

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush what is queued, waiting at most ``timeout_s``; then stop the writer thread."""
        deadline = time.monotonic() + timeout_s
        self._queue.put(None)
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive() and self._broken is None:
            self.warn(
                f"warning: MLflow tracking at {self.shown_uri} did not finish within "
                f"{timeout_s:g} s; some runs may be incomplete"
            )

    # -- MLflow calls (writer thread only) -----------------------------------------------
    def _experiment_id(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is None:
            return str(self.client.create_experiment(name))
        if found.lifecycle_stage == "deleted":
            self.client.restore_experiment(found.experiment_id)
        return str(found.experiment_id)

    def _find_parent(self, event: StudyStarted) -> str | None:
        if self.study is not None:
            run_id = self.study.user_attrs.get(PARENT_ATTR)
            if isinstance(run_id, str):
                with contextlib.suppress(Exception):
                    run = self.client.get_run(run_id)
                    if run.info.lifecycle_stage != "deleted":
                        return run_id
            return None
        runs = self.client.search_runs(
            [self.experiment_id],
            filter_string=(
                f"tags.`{TAG_STUDY}` = '{_quote(event.study_name)}' and "
                f"tags.`{TAG_STORAGE}` = '{_quote(event.storage)}'"
            ),
            max_results=1,
            order_by=["attributes.start_time ASC"],
        )
        return runs[0].info.run_id if runs else None

    def _open_parent(self, event: StudyStarted) -> None:
        from mlflow.entities import Param, RunTag

        self.experiment_id = self._experiment_id(self.experiment or event.study_name)
        parent = self._find_parent(event)
        if parent is None:
            tags = {TAG_STUDY: event.study_name, TAG_STORAGE: event.storage, **self.tags}
            run = self.client.create_run(
                self.experiment_id, tags=tags, run_name=self.run_name or event.study_name
            )
            parent = run.info.run_id
            if self.study is not None:
                self.study.set_user_attr(PARENT_ATTR, parent)
            self.parent_id = parent
        else:
            self.client.update_run(parent, status="RUNNING")
            self.parent_id = parent
            self._resume_best(parent)

        existing = self.client.get_run(parent).data.params
        params = {
            "study": event.study_name,
            "storage": event.storage,
            "direction": event.direction,
            "metric": event.metric,
            "n_trials": event.n_trials,
            **{f"space.{k}": v for k, v in event.space.items()},
            **{f"settings.{k}": v for k, v in event.settings.items()},
        }
        # A param cannot change in MLflow; on resume the first values stay (the study keeps
        # its own record of a changed space).
        new = [Param(_key(k), _text(v)) for k, v in params.items() if _key(k) not in existing]
        for i in range(0, len(new), 100):  # MLflow's batch limit on params
            self.client.log_batch(parent, params=new[i : i + 100])
        self.client.log_batch(parent, tags=[RunTag(k, _text(v)) for k, v in self.tags.items()])
        self.client.log_dict(parent, event.space, "search_space.json")
        if event.settings:
            self.client.log_dict(parent, event.settings, "settings.json")
        study_file = Path(event.study_file)
        if study_file.is_file():
            self.client.log_text(
                parent, redact_text(study_file.read_text(errors="replace")), study_file.name
            )

    def _study_best(self) -> tuple[int, float, dict[str, Any]] | None:
        """The study's best feasible trial (one objective): number, value, params."""
        if self.study is None or "," in self._direction:
            return None
        from optuna.trial import TrialState

        from dvt_hpo.results.front import select_best

        complete = self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        chosen = select_best(complete, [self._direction])
        if not chosen.trials:
            return None
        top = chosen.trials[0]
        return top.number, float(top.values[0]), dict(top.params)

    def _resume_best(self, parent: str) -> None:
        """A resumed parent's baseline: the study's best (logged again, so the parent shows
        it), else the best value the parent ever logged (not its latest)."""
        history = self.client.get_metric_history(parent, "best_value")
        self._best_step = max((m.step for m in history), default=-1) + 1
        truth = self._study_best()
        if truth is not None:
            self._best = None
            self._maybe_best(*truth, int(time.time() * 1000))
        elif history:
            values = [m.value for m in history]
            self._best = max(values) if self._direction == "maximize" else min(values)

    def _open_trial(self, event: TrialStarted) -> None:
        from mlflow.entities import Param

        try:
            if self.parent_id is None:
                raise RuntimeError("the study's parent run was not created")
            tags = {
                "mlflow.parentRunId": self.parent_id,
                TAG_TRIAL: str(event.number),
                TAG_STATE: "RUNNING",
            }
            if event.retry_of is not None:
                tags[TAG_RETRY_OF] = str(event.retry_of)
            run = self.client.create_run(
                self.experiment_id or "0",
                start_time=int(event.start_time * 1000),
                tags=tags,
                run_name=f"trial-{event.number}",
            )
            run_id = run.info.run_id
            with self._lock:
                self.run_ids[event.number] = run_id
                late = event.number in self._late
        finally:
            self._id_ready[event.number].set()
        if late and self.study is not None:
            # The loop stopped waiting for the id: the trial is running without it.
            storage_of(self.study).set_trial_user_attr(event.trial_id, RUN_ID_ATTR, run_id)
        params = [Param(_key(k), _text(v)) for k, v in event.params.items()]
        if params:
            self.client.log_batch(run_id, params=params)

    def _log_report(self, event: TrialReported, timestamp_ms: int) -> None:
        from mlflow.entities import Metric

        run_id = self.run_ids.get(event.number)
        if run_id is None:
            return
        metrics = [
            Metric(_key(k), float(v), timestamp_ms, int(event.step))
            for k, v in event.metrics.items()
            if isinstance(v, (int, float))
        ]
        if metrics:
            self.client.log_batch(run_id, metrics=metrics)

    def _close_trial(self, event: TrialFinished, timestamp_ms: int) -> None:
        from mlflow.entities import Metric, Param, RunTag

        run_id = self.run_ids.get(event.number)
        if run_id is None:
            return
        attrs = event.user_attrs
        existing = self.client.get_run(run_id).data.params
        params = [
            Param(k, _text(attrs[k])) for k in _ATTR_PARAMS if k in attrs and k not in existing
        ]
        metrics = [
            Metric(k, float(attrs[k]), timestamp_ms, 0)
            for k in _ATTR_METRICS
            if isinstance(attrs.get(k), (int, float))
        ]
        metrics.append(Metric("duration_s", float(event.duration_s), timestamp_ms, 0))
        if event.value is not None:
            metrics.append(Metric("objective_value", float(event.value), timestamp_ms, 0))
        names = self._metric.split(",")
        if len(event.values) > 1 and len(names) == len(event.values):
            metrics += [
                Metric(_key(f"objective.{n}"), float(v), timestamp_ms, 0)
                for n, v in zip(names, event.values, strict=True)
            ]
        tags = [RunTag(TAG_STATE, event.state)]
        if event.feasible is not None:
            tags.append(RunTag("feasible", str(event.feasible).lower()))
        if event.reason:
            tags.append(RunTag(TAG_REASON, event.reason[:5000]))
        if attrs.get("stderr_tail") and event.state == "FAIL":
            self.client.log_text(run_id, str(attrs["stderr_tail"]), "stderr_tail.txt")
        self.client.log_batch(run_id, metrics=metrics, params=params, tags=tags)
        self.client.set_terminated(run_id, _STATUS.get(event.state, "FAILED"))
        # study.budget: spent (one point per trial) and total, on the parent run.
        budget = [
            Metric(_key(k), float(v), timestamp_ms, event.number)
            for k, v in attrs.items()
            if k.startswith(("budget_spent.", "budget_total.")) and isinstance(v, (int, float))
        ]
        if budget and self.parent_id is not None:
            self.client.log_batch(self.parent_id, metrics=budget)
        # "Best" has a meaning for one objective and a feasible trial only.
        single = "," not in self._direction
        if (
            event.state == "COMPLETE"
            and event.value is not None
            and single
            and event.feasible is not False
        ):
            self._maybe_best(event.number, float(event.value), event.params, timestamp_ms)

    def _maybe_best(
        self, number: int, value: float, params: dict[str, Any], timestamp_ms: int
    ) -> None:
        from mlflow.entities import Metric, RunTag

        better = self._best is None or (
            value > self._best if self._direction == "maximize" else value < self._best
        )
        if not better or self.parent_id is None:
            return
        self._best = value
        tags = [RunTag("best_trial", str(number))]
        tags += [RunTag(_key(f"best.{k}"), _text(v)) for k, v in params.items()]
        # One step above the last improvement: MLflow shows the value of the highest step.
        step, self._best_step = self._best_step, self._best_step + 1
        self.client.log_batch(
            self.parent_id,
            metrics=[Metric("best_value", value, timestamp_ms, step)],
            tags=tags,
        )

    def _close_parent(self, event: StudyEnded) -> None:
        from mlflow.entities import Metric

        if self.parent_id is None:
            return
        now = int(time.time() * 1000)
        if event.best_value is not None and event.best_number is not None:
            self._maybe_best(event.best_number, event.best_value, event.best_params or {}, now)
        self.client.log_batch(
            self.parent_id, metrics=[Metric("trials_done", float(event.n_done), now, 0)]
        )
        status = {0: "FINISHED", 130: "KILLED"}.get(event.exit_code, "FAILED")
        self.client.set_terminated(self.parent_id, status)


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


__all__ = ["PARENT_ATTR", "RUN_ID_ATTR", "MlflowObserver", "import_mlflow", "redact_text"]
