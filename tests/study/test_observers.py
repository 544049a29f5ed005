"""The observers: the ones a study file asks for, and the fan-out (every call wrapped, a
raising observer is one warning line)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from dvt_hpo.study.events import BaseObserver, TrialStarted
from dvt_hpo.study.observers import Observers, study_observers
from dvt_hpo.studyfile import load_spec
from dvt_hpo.views.progress import ProgressObserver
from tests.conftest import toy_study


class Broken(BaseObserver):
    def trial_started(self, event: TrialStarted) -> dict[str, Any] | None:
        raise RuntimeError("tracking server down")


class Tagging(BaseObserver):
    def __init__(self, attrs: dict[str, Any] | None) -> None:
        self.attrs = attrs

    def trial_started(self, event: TrialStarted) -> dict[str, Any] | None:
        return self.attrs


EVENT = TrialStarted(number=4, trial_id=5, params={}, retry_of=None, start_time=0.0)


def test_an_observer_that_raises_is_one_warning_line() -> None:
    lines: list[str] = []
    observers = Observers([Broken()], lines.append)
    assert observers.trial_started(EVENT) == {}
    assert lines == [
        "warning: observer Broken.trial_started failed: RuntimeError: tracking server down"
    ]


def test_the_attrs_of_every_observer_are_merged_and_none_is_nothing() -> None:
    lines: list[str] = []
    observers = Observers(
        [Tagging({"a": 1}), Broken(), Tagging(None), Tagging({"b": 2})], lines.append
    )
    assert observers.trial_started(EVENT) == {"a": 1, "b": 2}
    assert len(lines) == 1


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
