"""The observers a study file asks for: progress, then MLflow when it sets tracking.mlflow."""

from __future__ import annotations

import io
from pathlib import Path

from dvt_hpo.run.observers import study_observers
from dvt_hpo.studyfile import load_spec
from dvt_hpo.views.progress import ProgressObserver
from tests.conftest import toy_study


def test_progress_only_without_tracking(write_study) -> None:
    spec = load_spec(write_study(toy_study("plain")))
    progress, observers = study_observers(spec, None, stream=io.StringIO())
    assert observers == [progress] and isinstance(progress, ProgressObserver)
    assert not progress.live_mode


def test_mlflow_when_the_study_file_sets_it(tmp_path: Path, write_study) -> None:
    from dvt_hpo.tracking.mlflow import MlflowObserver  # mlflow-skinny is in [test]

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = load_spec(write_study(toy_study("tracked", tracking={"mlflow": {"tracking_uri": uri}})))
    progress, observers = study_observers(spec, None, stream=io.StringIO())
    assert observers[0] is progress
    [tracker] = observers[1:]
    assert isinstance(tracker, MlflowObserver)
    assert tracker.tracking_uri == uri and tracker.experiment == "tracked"
    tracker.close(timeout_s=10)
