"""The observers' fan-out: every call wrapped, a raising observer is one warning line; a run's
observers (the study file's, then the caller's) and what they hear when it ends."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna

from dvt_hpo.results.events import BaseObserver, StudyEnded, TrialStarted
from dvt_hpo.study.observers import Observers, ended_event, for_run
from dvt_hpo.studyfile import load_spec
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


class View:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def out(self, line: str) -> None:
        self.lines.append(line)


def test_a_run_has_the_study_files_observers_then_the_callers() -> None:
    lines: list[str] = []
    view = View()
    asked: list[bool] = []

    def factory(spec: Any, study: Any, *, progress: bool, out: Any) -> Any:
        asked.append(progress)
        return view, [Tagging({"a": 1})]

    spec: Any = None  # the factory is the caller's: for_run only hands them on
    extra = [Broken(), Tagging({"b": 2})]
    observers, got = for_run(factory, spec, None, progress=True, out=lines.append, extra=extra)
    assert got is view and asked == [True]
    assert observers.trial_started(EVENT) == {"a": 1, "b": 2}
    assert lines == [] and len(view.lines) == 1  # the view prints the warnings from then on
    observers, got = for_run(None, spec, None, progress=False, out=lines.append)
    assert got is None and observers.trial_started(EVENT) == {}


def test_the_end_event_names_the_best_or_only_the_exit_code(
    write_study: Callable[..., Path],
) -> None:
    spec = load_spec(write_study(toy_study("ended")))
    study = optuna.create_study(direction=spec.objective.directions[0])
    study.enqueue_trial({"x": 0.5})
    trial = study.ask()
    trial.suggest_float("x", 0, 1)
    study.tell(trial, 0.25)
    event = ended_event(study, spec, 0)
    assert (event.n_done, event.best_value, event.best_number) == (1, 0.25, 0)

    def lost(**kwargs: Any) -> None:
        raise OSError("database gone")

    broken: Any = SimpleNamespace(get_trials=lost)
    assert ended_event(broken, spec, 1) == StudyEnded(0, None, None, None, 1)
