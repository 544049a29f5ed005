"""MLflow through a real study run: the study loop's events reach MLflow as they happen, and
a resumed study keeps its one parent run."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest

# mlflow-skinny is in [test]: imported plainly, so that a broken MLflow import fails here.
from mlflow.tracking import MlflowClient

from dvt_hpo.run.runner import study_runner
from dvt_hpo.studyfile import load_spec
from tests.conftest import REPO_ROOT, run_dvt_hpo, toy_study

pytestmark = pytest.mark.processes


def test_a_real_study_is_tracked_and_its_resume_reuses_the_parent_run(
    tmp_path: Path, write_study: Callable[..., Path], unique_name: str
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    doc = toy_study(
        unique_name,
        tracking={"mlflow": {"tracking_uri": uri, "experiment": "toys"}},
    )
    doc["study"]["n_trials"] = 3
    doc["study"]["pruner"] = {"kind": "threshold", "lower": 0.25}
    doc["trainer"]["entrypoint"] = "tests.entrypoints.switch:run"
    doc["trainer"]["config"] = {
        "actions": [{"do": "curve", "values": [0.5, 0.6]}],
        "fault_actions": [{"do": "raise", "message": "boom"}],
    }
    doc["search_space"] = [
        {"name": "fault", "path": "fault", "kind": "categorical", "choices": [False, True]},
        {"name": "x", "path": "x", "kind": "float", "low": 0.0, "high": 1.0},
    ]
    study_file = write_study(doc)
    spec = load_spec(study_file)
    created = optuna.create_study(
        storage=spec.study.storage, study_name=unique_name, direction="maximize"
    )
    created.enqueue_trial({"fault": False, "x": 0.5})
    created.enqueue_trial({"fault": True, "x": 0.5})
    lines: list[str] = []
    study_runner(spec, out=lines.append).run()

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("toys")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 3
    by_trial = {int(r.data.tags["dvt_hpo.trial"]): r for r in children}
    assert by_trial[0].info.status == "FINISHED"
    history = client.get_metric_history(by_trial[0].info.run_id, "score")
    assert [(m.step, m.value) for m in history] == [(0, 0.5), (1, 0.6)]
    assert by_trial[1].info.status == "FAILED"
    assert "boom" in by_trial[1].data.tags["dvt_hpo.reason"]
    stored = optuna.load_study(study_name=unique_name, storage=spec.study.storage)
    for trial in stored.trials:
        assert trial.user_attrs["mlflow_run_id"] == by_trial[trial.number].info.run_id

    # Resume with a larger budget: the same parent run, one new child, no duplicates.
    stored.enqueue_trial({"fault": False, "x": 0.25})
    study_runner(load_spec(study_file, ["study.n_trials=4"]), out=lines.append).run()
    runs = client.search_runs([experiment.experiment_id])
    assert [r.info.run_id for r in runs if "mlflow.parentRunId" not in r.data.tags] == [
        parents[0].info.run_id
    ]
    assert len([r for r in runs if "mlflow.parentRunId" in r.data.tags]) == 4


def test_a_run_prints_no_mlflow_info_lines(
    tmp_path: Path, write_study: Callable[..., Path]
) -> None:
    # A new tracking database: MLflow logs "Creating initial MLflow database tables..." and
    # alembic its migrations at INFO, on stderr (issue 18, item 5).
    doc = toy_study("quiet", tracking={"mlflow": {"tracking_uri": "sqlite:///mlflow.db"}})
    doc["study"]["n_trials"] = 1
    write_study(doc)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = run_dvt_hpo("run", "study.yaml", cwd=tmp_path, env=env, timeout_s=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "mlflow.db").is_file()
    output = done.stdout + done.stderr
    assert " INFO " not in output and "alembic" not in output, output
