"""The MLflow observer against a real local store (SQLite), read back with ``MlflowClient``:
a study with complete, pruned, failed and retried trials, then a resumed study."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import optuna
import pytest

# mlflow-skinny is in [test]: imported plainly, so that a broken MLflow import fails here.
from mlflow.tracking import MlflowClient

from dvt_hpo.results.events import (
    StudyEnded,
    StudyStarted,
    TrialFinished,
    TrialReported,
    TrialStarted,
)
from dvt_hpo.tracking.mlflow import PARENT_ATTR, RUN_ID_ATTR, MlflowObserver

# A real tracking store (SQLAlchemy migrations) and the observer's worker thread: seconds
# each, one waits out a store that stops answering.
pytestmark = pytest.mark.processes

SPACE = {"lr": {"kind": "float", "low": 1e-4, "high": 0.1, "log": True}, "width": [16, 32]}
SECRET_STUDY = """study:
  name: tracked
  storage: postgresql://hpo:s3cret-pw@db.example:5432/hpo
search_space: []
"""


class Loop:
    """What the study loop does around an observer: ask trials in a real Optuna study, store
    the user attrs ``trial_started`` returns, send the events in order."""

    def __init__(self, study: optuna.Study, observer: MlflowObserver, study_file: Path) -> None:
        self.study = study
        self.observer = observer
        self.study_file = study_file
        self.trials: dict[int, optuna.trial.Trial] = {}
        self.started_returned: list[dict[str, Any] | None] = []

    def start_study(self, n_done: int) -> None:
        self.observer.study_started(
            StudyStarted(
                study_name=self.study.study_name,
                storage="postgresql://hpo:***@db.example:5432/hpo",
                direction="maximize",
                metric="score",
                n_trials=4,
                n_done=n_done,
                study_file=str(self.study_file),
                space=SPACE,
                settings={"sampler": {"kind": "tpe", "seed": 0}, "pruner": {"kind": "median"}},
            )
        )

    def trial(
        self,
        state: str,
        curve: list[float],
        *,
        retry_of: int | None = None,
        reason: str | None = None,
        attrs: dict[str, Any] | None = None,
    ) -> int:
        trial = self.study.ask()
        params = {"lr": trial.suggest_float("lr", 1e-4, 0.1, log=True), "width": 32}
        returned = self.observer.trial_started(
            TrialStarted(trial.number, trial._trial_id, params, retry_of, time.time())
        )
        self.started_returned.append(returned)
        for key, value in (returned or {}).items():
            trial.set_user_attr(key, value)
        for step, value in enumerate(curve):
            trial.report(value, step)
            self.observer.trial_reported(
                TrialReported(trial.number, step, {"score": value, "loss": 1 - value}, step + 1.0)
            )
        value = max(curve) if state == "COMPLETE" else None
        if state == "COMPLETE":
            self.study.tell(trial, value)
        else:
            self.study.tell(trial, state=optuna.trial.TrialState[state])
        self.observer.trial_finished(
            TrialFinished(
                trial.number, trial._trial_id, state, value, params, reason, 2.5, attrs or {}
            ),
        )
        return trial.number

    def end(self, exit_code: int) -> None:
        best = self.study.best_trial
        self.observer.study_ended(
            StudyEnded(len(self.study.trials), best.value, best.params, best.number, exit_code)
        )
        self.observer.close(timeout_s=60)


def _children(client: MlflowClient, experiment_id: str) -> dict[int, Any]:
    runs = client.search_runs([experiment_id], max_results=1000)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return {int(r.data.tags["dvt_hpo.trial"]): r for r in children}


@pytest.mark.parametrize("keep_in_study", [True, False], ids=["study-attr", "tag-search"])
def test_study_with_pruned_failed_retried_trials_then_resumed(
    tmp_path: Path, keep_in_study: bool
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    study_file = tmp_path / "study.yaml"
    study_file.write_text(SECRET_STUDY)
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="tracked", storage=storage, direction="maximize")
    warnings: list[str] = []

    def observer() -> MlflowObserver:
        return MlflowObserver(
            uri,
            "hpo",
            study=study if keep_in_study else None,
            tags={"team": "vision"},
            warn=warnings.append,
            # Each trial here ends at once: its run id must come back before it does (the late
            # id, written on a running trial, is test_late_run_ids_are_written_on_the_trial's).
            # Returned as soon as it comes; 60 s only bounds a store that never answers.
            id_wait_s=60,
        )

    first = Loop(study, observer(), study_file)
    first.start_study(n_done=0)
    first.trial("COMPLETE", [0.2, 0.5, 0.6], attrs={"batch_size": 256, "batch_size_probes": 5})
    first.trial("PRUNED", [0.1], reason="pruned at step 0")
    first.trial(
        "FAIL", [0.3], reason="RuntimeError: boom", attrs={"stderr_tail": "Traceback...\nboom"}
    )
    first.end(exit_code=130)

    # A second orchestrator resumes the study: same parent run, the failed trial retried.
    second = Loop(study, observer(), study_file)
    second.start_study(n_done=3)
    second.trial("COMPLETE", [0.4, 0.9], retry_of=2, attrs={"batch_size": 128})
    second.end(exit_code=0)
    assert warnings == []

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("hpo")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1, [r.info.run_name for r in parents]
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["dvt_hpo.study"] == "tracked" and parent.data.tags["team"] == "vision"
    assert parent.data.params["direction"] == "maximize"
    assert json.loads(parent.data.params["space.lr"])["log"] is True
    assert json.loads(parent.data.params["settings.sampler"]) == {"kind": "tpe", "seed": 0}
    assert parent.data.metrics["best_value"] == pytest.approx(0.9)
    assert parent.data.tags["best_trial"] == "3" and "best.lr" in parent.data.tags
    # Artifacts land in this test's folder (tests/tracking/conftest.py), not ./mlruns of the
    # repository.
    assert Path(parent.info.artifact_uri).is_relative_to(tmp_path), parent.info.artifact_uri
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"search_space.json", "settings.json", "study.yaml"} <= artifacts
    copied = Path(client.download_artifacts(parent.info.run_id, "study.yaml", str(tmp_path)))
    assert "s3cret-pw" not in copied.read_text() and "hpo:***@db.example" in copied.read_text()
    if keep_in_study:
        assert study.user_attrs[PARENT_ATTR] == parent.info.run_id

    children = _children(client, experiment.experiment_id)
    assert sorted(children) == [0, 1, 2, 3]
    assert {r.data.tags["mlflow.parentRunId"] for r in children.values()} == {parent.info.run_id}
    for trial in study.trials:  # every trial knows its run, returned in time or written later
        assert trial.user_attrs[RUN_ID_ATTR] == children[trial.number].info.run_id

    done = children[0]
    assert done.info.status == "FINISHED" and done.data.tags["dvt_hpo.state"] == "COMPLETE"
    assert done.data.params["batch_size"] == "256" and done.data.params["batch_size_probes"] == "5"
    assert float(done.data.params["lr"]) == pytest.approx(study.trials[0].params["lr"])
    assert done.data.metrics["objective_value"] == pytest.approx(0.6)
    history = client.get_metric_history(done.info.run_id, "score")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [
        (0, 0.2),
        (1, 0.5),
        (2, 0.6),
    ]
    assert len(client.get_metric_history(done.info.run_id, "loss")) == 3

    pruned = children[1]
    assert pruned.info.status == "KILLED" and pruned.data.tags["dvt_hpo.state"] == "PRUNED"
    assert pruned.data.tags["dvt_hpo.reason"] == "pruned at step 0"
    assert "objective_value" not in pruned.data.metrics

    failed = children[2]
    assert failed.info.status == "FAILED" and failed.data.tags["dvt_hpo.state"] == "FAIL"
    assert failed.data.tags["dvt_hpo.reason"] == "RuntimeError: boom"
    assert "stderr_tail.txt" in {a.path for a in client.list_artifacts(failed.info.run_id)}

    retried = children[3]
    assert retried.data.tags["dvt_hpo.retry_of"] == "2"
    assert retried.info.status == "FINISHED"


def test_late_run_ids_are_written_on_the_trial(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    study = optuna.create_study(
        study_name="late", storage=f"sqlite:///{tmp_path / 'o.db'}", direction="maximize"
    )
    loop = Loop(study, MlflowObserver(uri, None, study=study, id_wait_s=0), tmp_path / "none")
    loop.start_study(n_done=0)
    trial = study.ask()  # a running trial, as when the loop stopped waiting for the id
    assert loop.observer.trial_started(
        TrialStarted(trial.number, trial._trial_id, {}, None, 0.0)
    ) in (
        None,
        {RUN_ID_ATTR: loop.observer.run_ids.get(trial.number)},
    )
    loop.observer.close(timeout_s=60)
    run_id = study.trials[0].user_attrs[RUN_ID_ATTR]
    assert MlflowClient(tracking_uri=uri).get_run(run_id).data.tags["dvt_hpo.trial"] == "0"
    # No experiment name: the study's name.
    assert MlflowClient(tracking_uri=uri).get_experiment_by_name("late") is not None


def test_an_unreachable_server_is_one_warning_and_the_study_goes_on(
    tmp_path: Path, free_port: int
) -> None:
    warnings: list[str] = []
    study = optuna.create_study(
        study_name="offline", storage=f"sqlite:///{tmp_path / 'o.db'}", direction="maximize"
    )
    observer = MlflowObserver(
        f"http://user:pw@127.0.0.1:{free_port}", "hpo", id_wait_s=1.0, warn=warnings.append
    )
    loop = Loop(study, observer, tmp_path / "none")
    loop.start_study(n_done=0)
    for _ in range(3):
        loop.trial("COMPLETE", [0.1, 0.2, 0.3])
    # That the loop never waits for the server is the gated test below's (causal) check.
    loop.end(exit_code=0)
    assert len(study.trials) == 3 and all(t.state.name == "COMPLETE" for t in study.trials)
    assert observer.broken is not None
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(
        f"warning: MLflow tracking at http://user:***@127.0.0.1:{free_port}"
    )
    assert "pw@" not in warnings[0] and "\n" not in warnings[0]


def test_missing_extra_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from dvt_hpo.exceptions import DvtHpoError

    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(DvtHpoError) as info:
        MlflowObserver("sqlite:///x.db", "e")
    assert str(info.value) == (
        "tracking.mlflow is set but MLflow is not installed: pip install 'dvt-hpo[mlflow]'"
    )


def test_a_store_that_goes_away_mid_study_is_one_warning(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "mlflow.db"
    warnings: list[str] = []
    study = optuna.create_study(
        study_name="midway", storage=f"sqlite:///{tmp_path / 'o.db'}", direction="maximize"
    )
    observer = MlflowObserver(f"sqlite:///{db}", "hpo", id_wait_s=1.0, warn=warnings.append)
    loop = Loop(study, observer, tmp_path / "none")
    loop.start_study(n_done=0)
    loop.trial("COMPLETE", [0.1, 0.2])
    observer._queue.join()  # the first trial is recorded before the store goes away
    assert observer.broken is None
    # The store stops answering: every write now waits for a lock it never gets.
    blocker = sqlite3.connect(db, timeout=0)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        for _ in range(3):
            loop.trial("COMPLETE", [0.3, 0.4])
        loop.end(exit_code=0)
    finally:
        blocker.rollback()
        blocker.close()
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 4
    assert observer.broken is not None and "locked" in observer.broken
    assert len(warnings) == 1 and "the study goes on without it" in warnings[0]
    children = _children(MlflowClient(tracking_uri=f"sqlite:///{db}"), observer.experiment_id)
    assert 0 in children and children[0].info.status == "FINISHED"


class GatedClient:
    """The observer's real ``MlflowClient`` behind a gate: while the gate is closed, each MLflow
    call of the observer's worker thread waits, as on a tracking server that does not answer."""

    def __init__(self, client: MlflowClient) -> None:
        self._client = client
        self.gate = threading.Event()
        self.entered = threading.Event()  # the worker is waiting at the gate
        self.completed = 0  # MLflow calls that returned

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def gated(*args: Any, **kwargs: Any) -> Any:
            self.entered.set()
            self.gate.wait()
            try:
                return attr(*args, **kwargs)
            finally:
                self.completed += 1

        return gated


def test_the_loop_never_waits_for_a_store_that_does_not_answer(tmp_path: Path) -> None:
    """Each observer call returns while not one MLflow call has come back: ``trial_started``
    after its bounded wait for the run id, the others at once (queued); nothing is lost once
    the store answers."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    study = optuna.create_study(
        study_name="gated", storage=f"sqlite:///{tmp_path / 'o.db'}", direction="maximize"
    )
    warnings: list[str] = []
    observer = MlflowObserver(uri, "hpo", id_wait_s=0.5, warn=warnings.append)
    gated = GatedClient(observer.client)
    observer.client = gated  # type: ignore[assignment]
    loop = Loop(study, observer, tmp_path / "none")
    loop.start_study(n_done=0)
    assert gated.entered.wait(60), "the worker never called MLflow"
    for _ in range(2):
        loop.trial("COMPLETE", [0.2, 0.4, 0.6])
    loop.observer.study_ended(StudyEnded(2, 0.6, {}, 0, 0))
    # Every call above returned while the worker was still held in its first MLflow call.
    assert gated.completed == 0
    assert loop.started_returned == [None, None]  # no run id within id_wait_s: not waited for
    gated.gate.set()
    observer.close(timeout_s=60)
    assert warnings == [] and observer.broken is None
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("hpo")
    children = _children(client, experiment.experiment_id)
    assert sorted(children) == [0, 1]
    for run in children.values():
        assert run.info.status == "FINISHED"
        history = client.get_metric_history(run.info.run_id, "score")
        assert sorted((m.step, m.value) for m in history) == [(0, 0.2), (1, 0.4), (2, 0.6)]


def _parent(client: MlflowClient, name: str) -> Any:
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    return parent


def test_the_parent_shows_the_best_when_trials_finish_out_of_order(tmp_path: Path) -> None:
    # Two trials at a time: trial 1 finishes first with 0.5, then trial 0 with 0.9.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    study = optuna.create_study(
        study_name="order", storage=f"sqlite:///{tmp_path / 'o.db'}", direction="maximize"
    )
    loop = Loop(study, MlflowObserver(uri, "order", study=study), tmp_path / "none")
    loop.start_study(n_done=0)
    first, second = study.ask(), study.ask()
    for trial in (first, second):
        loop.observer.trial_started(TrialStarted(trial.number, trial._trial_id, {}, None, 0.0))
    for trial, value in ((second, 0.5), (first, 0.9)):
        study.tell(trial, value)
        loop.observer.trial_finished(
            TrialFinished(trial.number, trial._trial_id, "COMPLETE", value, {}, None, 1.0, {})
        )
    loop.end(exit_code=0)

    parent = _parent(MlflowClient(tracking_uri=uri), "order")
    assert parent.data.metrics["best_value"] == pytest.approx(0.9)
    assert parent.data.tags["best_trial"] == "0"


def test_a_resumed_parent_takes_the_study_best_not_what_mlflow_showed(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    study = optuna.create_study(
        study_name="resumed", storage=f"sqlite:///{tmp_path / 'o.db'}", direction="maximize"
    )
    first = Loop(study, MlflowObserver(uri, "resumed", study=study), tmp_path / "none")
    first.start_study(n_done=0)
    first.trial("COMPLETE", [0.6])
    first.end(exit_code=0)
    client = MlflowClient(tracking_uri=uri)
    parent_id = _parent(client, "resumed").info.run_id
    # What the old step = trial number showed after an out-of-order finish: a worse value.
    from mlflow.entities import Metric

    client.log_batch(parent_id, metrics=[Metric("best_value", 0.3, int(time.time() * 1000), 7)])

    second = Loop(study, MlflowObserver(uri, "resumed", study=study), tmp_path / "none")
    second.start_study(n_done=1)
    second.trial("COMPLETE", [0.5])  # better than 0.3, not than the study's 0.6
    second.end(exit_code=0)

    parent = _parent(client, "resumed")
    assert parent.info.run_id == parent_id
    assert parent.data.metrics["best_value"] == pytest.approx(0.6)
    assert parent.data.tags["best_trial"] == "0"
