"""The study loop's observers, on a real small study: complete, failed and pruned trials."""

from __future__ import annotations

import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dvt_hpo.events import (
    BaseObserver,
    StudyEnded,
    StudyStarted,
    TrialFinished,
    TrialReported,
    TrialStarted,
)
from dvt_hpo.spec import load_spec
from dvt_hpo.study_loop import StudyRunner
from tests.conftest import toy_study

# Trial 0 completes, trial 1 raises, trial 2 is pruned at its first report (score < 0.5).
THREE_FATES = """
def run(config, ctx):
    if ctx.trial_number == 1:
        raise ValueError("trial one breaks")
    score = 0.9 if ctx.trial_number == 0 else 0.1
    for step in range(2):
        ctx.report(step, {"score": score, "loss": 1.0 - score})
    return {"score": score}
"""


class Recording(BaseObserver):
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.lock = threading.Lock()
        self.closed = False

    def _add(self, event: Any) -> None:
        with self.lock:
            self.events.append(event)

    def study_started(self, event: StudyStarted) -> None:
        self._add(event)

    def trial_started(self, event: TrialStarted) -> dict[str, Any] | None:
        self._add(event)
        return {"observer_run_id": f"run-{event.number}"}

    def trial_reported(self, event: TrialReported) -> None:
        self._add(event)

    def trial_finished(self, event: TrialFinished) -> None:
        self._add(event)

    def study_ended(self, event: StudyEnded) -> None:
        self._add(event)

    def close(self) -> None:
        self.closed = True


class Broken(BaseObserver):
    def trial_started(self, event: TrialStarted) -> dict[str, Any] | None:
        raise RuntimeError("tracking server down")

    def trial_reported(self, event: TrialReported) -> None:
        raise RuntimeError("tracking server down")


def of(events: list[Any], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


@pytest.mark.processes
def test_observers_see_the_study_and_a_broken_one_costs_only_warnings(
    write_study: Callable[..., Path], unique_name: str, tmp_path: Path
) -> None:
    (tmp_path / "fates.py").write_text(textwrap.dedent(THREE_FATES))
    doc = toy_study(
        unique_name,
        study={"n_trials": 3, "pruner": {"kind": "threshold", "lower": 0.5}},
    )
    doc["trainer"]["entrypoint"] = "fates:run"
    spec = load_spec(write_study(doc))
    recording = Recording()
    lines: list[str] = []
    study = StudyRunner(spec, out=lines.append, observers=[Broken(), recording]).run()
    events = recording.events

    assert isinstance(events[0], StudyStarted) and isinstance(events[-1], StudyEnded)
    started = events[0]
    assert (started.study_name, started.n_trials, started.n_done) == (unique_name, 3, 0)
    assert started.metric == "score" and started.direction == "maximize"

    assert [e.number for e in of(events, TrialStarted)] == [0, 1, 2]
    assert all(e.retry_of is None for e in of(events, TrialStarted))
    finished = {e.number: e for e in of(events, TrialFinished)}
    assert {n: e.state for n, e in finished.items()} == {0: "COMPLETE", 1: "FAIL", 2: "PRUNED"}
    assert finished[0].value == 0.9 and finished[0].reason is None
    assert "ValueError: trial one breaks" in (finished[1].reason or "")
    assert finished[2].reason == "pruned at step 0"
    assert finished[0].user_attrs["epochs_reported"] == 2

    reported = of(events, TrialReported)
    assert [(e.number, e.step) for e in reported] == [(0, 0), (0, 1), (2, 0)]
    assert reported[0].metrics == {"score": 0.9, "loss": pytest.approx(0.1)}
    for number in (0, 2):  # each trial's reports come between its start and its finish
        index = [i for i, e in enumerate(events) if getattr(e, "number", None) == number]
        kinds = [type(events[i]) for i in index]
        assert kinds[0] is TrialStarted and kinds[-1] is TrialFinished

    ended = events[-1]
    assert (ended.n_done, ended.best_number, ended.best_value, ended.exit_code) == (2, 0, 0.9, 0)
    assert recording.closed

    # What trial_started returned is on the trial; the broken observer changed nothing else.
    assert [t.user_attrs["observer_run_id"] for t in study.trials] == ["run-0", "run-1", "run-2"]
    warnings = [line for line in lines if line.startswith("warning: observer Broken.")]
    assert len(warnings) == 3 + 3  # trial_started x3, trial_reported x3 (one line each)
    assert all("tracking server down" in line for line in warnings)
