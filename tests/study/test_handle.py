"""dvt_hpo.study.handle: the :class:`StudyHandle` a trial's run gets from the loop, on a real
study, without a trial process: each of its parts reaches the open study and the loop's own
state, and a run cannot swap one. Trials run through it: tests/study/test_trial_run.py."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from dvt_hpo.budget.compute import BudgetWatch
from dvt_hpo.results.outcome import TrialOutcome
from dvt_hpo.study.handle import StudyHandle
from dvt_hpo.study.loop import StudyRunner
from dvt_hpo.studyfile import load_spec
from tests.conftest import toy_study


@pytest.fixture
def opened(write_study: Callable[..., Path], unique_name: str) -> StudyRunner:
    runner = StudyRunner(load_spec(write_study(toy_study(unique_name))), out=lambda line: None)
    runner.open_study()
    return runner


def test_the_handle_is_the_open_study_and_the_loops_state(opened: StudyRunner) -> None:
    handle = opened.handle
    assert isinstance(handle, StudyHandle)
    assert (handle.study, handle.storage, handle.spec) == (
        opened.study,
        opened.storage,
        opened.spec,
    )
    assert handle.study.study_name == opened.spec.study.name
    assert handle.child_env["PYTHONPATH"].split(os.pathsep)[0] == str(opened.spec.path.parent)
    # The loop's own lock around storage calls: its threads and the trials' share it.
    assert handle.lock is opened.study_lock
    assert handle.worker_stopped is opened.worker_stopped and not handle.worker_stopped.is_set()
    assert handle.budget is None  # no study.budget
    assert handle.db(lambda: 41 + 1, "a call") == 42


def test_an_outcome_given_to_the_handle_reaches_the_loops_queue(opened: StudyRunner) -> None:
    outcome = TrialOutcome(
        number=0, trial_id=1, state="COMPLETE", value=0.3, params={}, duration_s=1
    )
    opened.handle.finished(outcome)
    assert opened.events.get_nowait() is outcome


def test_an_attempt_is_failed_and_copied_exactly_once(opened: StudyRunner) -> None:
    storage, study_id = opened.storage, opened.study_id
    trial_id = storage.create_new_trial(study_id)
    assert opened.handle.fail_attempt(trial_id) is True
    assert opened.handle.fail_attempt(trial_id) is False  # already failed: no second copy
    states = [t.state.name for t in storage.get_all_trials(study_id, deepcopy=False)]
    assert states == ["FAIL", "WAITING"]


def test_a_trials_run_cannot_swap_what_the_handle_holds(opened: StudyRunner) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        opened.handle.study = None  # type: ignore[misc]


def test_a_study_budget_gives_the_run_its_watch(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    doc = toy_study(unique_name, study={"budget": {"epochs": 10}})
    runner = StudyRunner(load_spec(write_study(doc)), out=lambda line: None)
    runner.open_study()
    assert isinstance(runner.handle.budget, BudgetWatch)
