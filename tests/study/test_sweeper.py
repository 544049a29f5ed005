"""The worker's sweep of other workers' trials (dvt_hpo.study.sweeper), on a real SQLite study
with heartbeats: a dead worker's trial is failed and copied, this worker's own never, and none
is judged right after a database outage that this worker met only through its heartbeats."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy

from dvt_hpo.store.errors import MAX_BACKOFF_S, OutageRetry
from dvt_hpo.study.setup import open_for_run
from dvt_hpo.study.sweeper import Sweeper
from dvt_hpo.studyfile import load_spec
from tests.conftest import toy_study
from tests.recovery.test_stale import beat_ago

pytestmark = [
    pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning"),
    pytest.mark.filterwarnings("ignore:Heartbeat of storage"),
]


def _sweeper(write_study: Callable[..., Path], running: dict[int, Any]) -> Sweeper:
    doc = toy_study("sweep", study={"storage": "sqlite:///sweep.db", "grace_period_s": 2})
    spec = load_spec(write_study(doc))
    opened = open_for_run(spec, allow_space_change=False, out=lambda line: None)
    lock = threading.RLock()
    db = OutageRetry(spec.study.storage, 5, out=lambda line: None)
    return Sweeper(spec, opened.study, opened.storage, lock, threading.RLock, db, running)


def _states(sweeper: Sweeper) -> list[str]:
    return [t.state.name for t in sweeper.study.get_trials(deepcopy=False)]


def test_a_dead_workers_trial_is_retried_and_ours_is_not(
    write_study: Callable[..., Path],
) -> None:
    running: dict[int, Any] = {}
    sweeper = _sweeper(write_study, running)
    ours, theirs = sweeper.study.ask(), sweeper.study.ask()
    running[ours.number] = SimpleNamespace(trial_id=ours._trial_id)
    for trial in (ours, theirs):
        beat_ago(sweeper.storage, trial._trial_id, 10)
    sweeper.sweep()
    assert _states(sweeper) == ["RUNNING", "FAIL", "WAITING"]


def test_after_an_outage_met_by_a_heartbeat_no_trial_is_judged_stale(
    write_study: Callable[..., Path],
) -> None:
    sweeper = _sweeper(write_study, {})
    theirs = sweeper.study.ask()
    beat_ago(sweeper.storage, theirs._trial_id, 10)  # no worker's heartbeat could land

    def refused() -> None:
        engine = sqlalchemy.create_engine("postgresql://u@127.0.0.1:1/db")
        engine.connect()

    with pytest.raises(sqlalchemy.exc.OperationalError):
        sweeper.db.once(refused)  # the heartbeat thread's one try, during the outage
    sweeper.db.once(sweeper.sweep)  # the database is back: its first sweep
    assert _states(sweeper) == ["RUNNING"]
    # The grace alone is not enough: a live worker's heartbeat may land one backoff pause and
    # one interval later (its calls resume after their pause, its thread beats once a second).
    section = sweeper.spec.study
    sweeper.db._back_at -= section.grace_period_s + 0.5  # type: ignore[operator]
    sweeper.sweep()
    assert _states(sweeper) == ["RUNNING"]
    # Once that has passed too since the database answered, the rule applies again.
    sweeper.db._back_at -= MAX_BACKOFF_S + section.heartbeat_interval_s  # type: ignore[operator]
    sweeper.sweep()
    assert _states(sweeper) == ["FAIL", "WAITING"]


def test_the_other_workers_running_trials_and_their_heartbeats_ages(
    write_study: Callable[..., Path],
) -> None:
    running: dict[int, Any] = {}
    sweeper = _sweeper(write_study, running)
    ours, theirs, silent = sweeper.study.ask(), sweeper.study.ask(), sweeper.study.ask()
    running[ours.number] = SimpleNamespace(trial_id=ours._trial_id)
    beat_ago(sweeper.storage, theirs._trial_id, 10)
    numbers, ages = sweeper.foreign_running()
    assert numbers == [theirs.number, silent.number]
    assert set(ages) == {theirs.number}  # a trial that never beat has no age
    assert ages[theirs.number] >= 9
