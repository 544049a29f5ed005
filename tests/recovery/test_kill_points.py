"""A worker killed at each step of a trial's bookkeeping loses nothing (docs/recovery.md).

Each test starts a real ``dvt-hpo run`` with ``DVT_HPO_KILL_AT=<step>``: the worker SIGKILLs
itself when it reaches that step (:mod:`dvt_hpo.recovery.kill_points`), leaving exactly what a kill
there leaves. Then a live worker's sweep, or the next ``run``, must repair it: the study ends
with its exact budget, every failed attempt retried once with the same params, nothing RUNNING
or WAITING, and no trial process left behind. Once on SQLite, once on PostgreSQL.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest

from dvt_hpo.process import tree as process_tree
from dvt_hpo.recovery import kill_points
from tests.conftest import toy_study
from tests.lost_nothing import problems
from tests.orchestrator import (
    Orchestrator,
    fifo_study,
    load_trials,
    processes_mentioning,
    states,
    wait_trial_running,
)

pytestmark = pytest.mark.processes

# Long enough for a worker that waits on a stale trial (grace 2 s) and runs its retry under
# load; the old code hung here for good on a RUNNING trial without a heartbeat.
FINISH_TIMEOUT_S = 90.0
FAST = {"heartbeat_interval_s": 1, "grace_period_s": 2}
# The steps a worker goes through for its own trial, in order.
OWN_TRIAL_STEPS = (
    "ask",
    "start:heartbeat",
    "start:params",
    "trial:running",
    "trial:ended",
    "record:before_tell",
)
# After these its trial wrote an ok result: the sweep records it COMPLETE, never runs it again.
FINISHED_STEPS = ("trial:ended", "record:before_tell")
# The steps of failing an attempt for a retry, by its own worker or by another's sweep.
RETRY_STEPS = ("retry:marked", "retry:failed", "retry:locked", "retry:enqueued")


@pytest.fixture
def worker(orchestrator: Callable[..., Orchestrator]) -> Callable[..., Orchestrator]:
    """Start ``dvt-hpo run STUDY``, killed at ``kill_at`` when given (the
    orchestrator fixture: whatever is left is killed at teardown)."""

    def start(study: Path, kill_at: str | None = None) -> Orchestrator:
        return orchestrator(study, env={kill_points.ENV_KILL_AT: kill_at} if kill_at else None)

    return start


def assert_killed(run: Orchestrator, step: str) -> None:
    code, out = run.finish(FINISH_TIMEOUT_S)
    assert code == -signal.SIGKILL, f"the worker was not killed at {step!r} (exit {code}):\n{out}"


def assert_lost_nothing(study: Path, n_trials: int, runs_dir: Path) -> list[Any]:
    trials = load_trials(study)
    assert problems(trials, n_trials) == [], states(trials)
    # The killed worker's trial process (and warm template) died with it.
    assert process_tree.wait_gone(processes_mentioning(runs_dir), 10), "orphan processes"
    return trials


def finish_cleanly(run: Orchestrator) -> str:
    code, out = run.finish(FINISH_TIMEOUT_S)
    assert code == 0, out
    return out


def quick_study(name: str, storage_url: str, n_trials: int) -> dict[str, Any]:
    return toy_study(
        name, study={"storage": storage_url, "n_trials": n_trials, **FAST}, trials={"warm": False}
    )


@pytest.mark.parametrize("step", OWN_TRIAL_STEPS)
def test_a_worker_killed_at_each_step_of_its_trial_loses_nothing(
    storage_url: str,
    write_study: Callable[..., Path],
    worker: Callable[..., Orchestrator],
    runs_dir: Path,
    unique_name: str,
    step: str,
) -> None:
    study = write_study(quick_study(unique_name, storage_url, 2))
    assert_killed(worker(study, step), step)
    left = load_trials(study)
    assert states(left) == [(0, "RUNNING")], states(left)

    finish_cleanly(worker(study))
    trials = assert_lost_nothing(study, 2, runs_dir)
    if step in FINISHED_STEPS:
        # Recorded as its own worker would have, by the sweep: no copy, nothing run twice.
        assert states(trials) == [(0, "COMPLETE"), (1, "COMPLETE")], states(trials)
        assert trials[0].user_attrs["recorded_by"] == "sweep"
        assert trials[0].user_attrs["status"] == "ok"
        assert trials[0].value is not None and trials[0].intermediate_values
        return
    assert trials[0].state.name == "FAIL"  # the killed attempt, failed as stale and retried
    # A kill before the params were sampled leaves none: the copy samples them afresh.
    assert trials[0].params == left[0].params


@pytest.mark.parametrize("step", RETRY_STEPS)
def test_a_worker_killed_while_retrying_its_interrupted_trial_loses_nothing(
    storage_url: str,
    tmp_path: Path,
    write_study: Callable[..., Path],
    worker: Callable[..., Orchestrator],
    runs_dir: Path,
    unique_name: str,
    step: str,
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sections = {"study": {"storage": storage_url, "n_trials": 1, **FAST}}
    study = write_study(fifo_study(unique_name, fifo, trials={"warm": False}, **sections))
    run = worker(study, step)
    wait_trial_running(fifo)
    params = load_trials(study)[0].params
    os.killpg(run.proc.pid, signal.SIGINT)  # Ctrl-C: the trial is recorded for a retry...
    assert_killed(run, step)  # ...and the worker dies on the way

    fifo.unlink()  # the toy's FIFO actions become plain file I/O: the retry finishes
    finish_cleanly(worker(study))
    trials = assert_lost_nothing(study, 1, runs_dir)
    assert trials[0].state.name == "FAIL" and trials[0].params == params


@pytest.mark.parametrize("step", RETRY_STEPS)
def test_a_worker_killed_while_failing_a_dead_workers_trial_loses_nothing(
    storage_url: str,
    write_study: Callable[..., Path],
    worker: Callable[..., Orchestrator],
    runs_dir: Path,
    unique_name: str,
    step: str,
) -> None:
    study = write_study(quick_study(unique_name, storage_url, 2))
    # A first worker dies with trial 0 running: its heartbeat stops.
    assert_killed(worker(study, "trial:running"), "trial:running")
    params = load_trials(study)[0].params
    # A second one runs trial 1, waits on trial 0 until it is stale, fails it for a retry (its
    # sweep) and dies on the way.
    assert_killed(worker(study, step), step)

    out = finish_cleanly(worker(study))
    assert "nothing to run" not in out
    trials = assert_lost_nothing(study, 2, runs_dir)
    assert trials[0].state.name == "FAIL" and trials[0].params == params


def test_a_worker_killed_while_recording_a_dead_workers_finished_trial_loses_nothing(
    storage_url: str,
    write_study: Callable[..., Path],
    worker: Callable[..., Orchestrator],
    runs_dir: Path,
    unique_name: str,
) -> None:
    """A sweep recording a dead worker's finished trial (its ok result in its folder) dies
    after writing its attrs: the next sweep records it, once, and nothing runs it again."""
    doc = quick_study(unique_name, storage_url, 2)
    doc["trials"]["keep_logs"] = "all"
    study = write_study(doc)
    assert_killed(worker(study, "trial:ended"), "trial:ended")
    assert_killed(worker(study, "finished:attrs"), "finished:attrs")
    left = load_trials(study)
    assert left[0].state.name == "RUNNING" and left[0].user_attrs["recorded_by"] == "sweep"

    finish_cleanly(worker(study))
    trials = assert_lost_nothing(study, 2, runs_dir)
    assert states(trials) == [(0, "COMPLETE"), (1, "COMPLETE")], states(trials)
    assert trials[0].user_attrs["recorded_by"] == "sweep"


def test_a_running_trial_without_a_heartbeat_is_retried_after_the_grace_period(
    storage_url: str,
    write_study: Callable[..., Path],
    worker: Callable[..., Orchestrator],
    runs_dir: Path,
    unique_name: str,
) -> None:
    # What a worker killed between its ask and its first heartbeat leaves (or an ask retried
    # after an outage whose INSERT had landed): RUNNING, and no heartbeat row at all.
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    plain = optuna.create_study(storage=storage_url, study_name=unique_name, direction="maximize")
    plain.ask()
    study = write_study(quick_study(unique_name, storage_url, 2))

    finish_cleanly(worker(study))
    trials = assert_lost_nothing(study, 2, runs_dir)
    assert trials[0].state.name == "FAIL"
