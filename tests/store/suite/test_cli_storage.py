"""The study database seen through ``dvt-hpo run`` subprocesses, once per backend.

Black-box: only the command line, the study file and the database are used, so these tests hold
whatever the orchestrator's modules look like inside. The kill -9 helpers (FIFO handshake,
orchestrator subprocesses) are the recovery tests' own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest

from dvt_hpo.process import tree as process_tree
from dvt_hpo.store.opening import StudyAt
from tests.conftest import REPO_ROOT, run_dvt_hpo, toy_study
from tests.orchestrator import (
    EVENT_TIMEOUT_S,
    Orchestrator,
    fifo_study,
    processes_mentioning,
    wait_trial_running,
)
from tests.store.suite.gated import run_gated

pytestmark = pytest.mark.processes

RACE_ATTEMPTS = [4, 8, 4, 8, 4]  # workers per race; 5 races per backend


def load_trials(storage_url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    study = StudyAt(storage_url, name).load().study
    return sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)


def counted(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    """The trials that count towards n_trials (what the study loop counts)."""
    superseded = {n for t in trials for n in t.system_attrs.get("retry_history", [])}
    return [
        t
        for t in trials
        if not any(k.endswith("over_budget") for k in t.system_attrs)
        and not (t.state.name == "FAIL" and t.number in superseded)
    ]


def dvt_hpo_run(study: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_dvt_hpo("run", study, *args, cwd=REPO_ROOT, timeout_s=120)


def test_create_run_and_rerun(
    storage_url: str, write_study: Callable[..., Path], unique_name: str
) -> None:
    study = write_study(toy_study(unique_name, study={"storage": storage_url, "n_trials": 3}))
    first = dvt_hpo_run(study)
    assert first.returncode == 0, first.stdout + first.stderr
    trials = load_trials(storage_url, unique_name)
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    again = dvt_hpo_run(study)
    assert again.returncode == 0, again.stderr
    assert "nothing to run" in again.stdout
    assert len(load_trials(storage_url, unique_name)) == 3


def test_resume_after_kill_9_of_the_orchestrator(
    storage_url: str,
    tmp_path: Path,
    write_study: Callable[..., Path],
    orchestrator: Callable[[Path], Orchestrator],
    runs_dir: Path,
    unique_name: str,
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    study = write_study(
        fifo_study(unique_name, fifo, study={"storage": storage_url, "n_trials": 2})
    )
    first = orchestrator(study)
    wait_trial_running(fifo)
    first.proc.kill()
    assert first.proc.wait(timeout=EVENT_TIMEOUT_S) == -signal.SIGKILL
    before = load_trials(storage_url, unique_name)
    assert [t.state.name for t in before] == ["RUNNING"]

    fifo.unlink()  # the toy's FIFO actions become plain file I/O: every trial finishes
    code, out = orchestrator(study).finish()
    assert code == 0, out
    trials = load_trials(storage_url, unique_name)
    assert trials[0].state.name == "FAIL"
    retry = next(t for t in trials if t.system_attrs.get("failed_trial") == 0)
    assert retry.state.name == "COMPLETE" and retry.params == before[0].params
    assert len(counted(trials)) == 2
    assert all(t.state.name == "COMPLETE" for t in counted(trials))


def test_a_killed_workers_trial_is_retried_by_a_running_worker(
    storage_url: str,
    tmp_path: Path,
    write_study: Callable[..., Path],
    orchestrator: Callable[[Path], Orchestrator],
    runs_dir: Path,
    unique_name: str,
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sections: dict[str, Any] = {"study": {"storage": storage_url, "n_trials": 2}}
    # Both workers share the study; each has its own file so that their trials behave apart.
    a = write_study(fifo_study(unique_name, fifo, **sections), "a.yaml")
    b = write_study(toy_study(unique_name, **sections), "b.yaml")
    worker_a = orchestrator(a)
    wait_trial_running(fifo)  # worker A's trial 0 runs and blocks
    worker_b = orchestrator(b)
    worker_b.wait_line("trial   1 COMPLETE")  # B ran trial 1; trial 0 is A's, still running
    worker_a.proc.kill()  # A dies; trial 0's heartbeat goes stale; B fails it and reruns it
    assert worker_a.proc.wait(timeout=EVENT_TIMEOUT_S) == -signal.SIGKILL
    code, out = worker_b.finish()
    assert code == 0, out
    trials = load_trials(storage_url, unique_name)
    assert trials[0].state.name == "FAIL"
    retry = next(t for t in trials if t.system_attrs.get("failed_trial") == 0)
    assert retry.state.name == "COMPLETE" and retry.params == trials[0].params
    assert f"trial {retry.number:>3} COMPLETE" in out
    assert len(counted(trials)) == 2
    # A's trial died with A (its control socket closed): nothing is left behind.
    assert process_tree.wait_gone(processes_mentioning(runs_dir), 10)


@pytest.mark.parametrize("attempt", range(len(RACE_ATTEMPTS)))
def test_workers_started_at_the_same_instant_on_a_fresh_database(
    attempt: int,
    fresh_storage_url: Callable[[], str],
    write_study: Callable[..., Path],
    tmp_path: Path,
    unique_name: str,
) -> None:
    workers = RACE_ATTEMPTS[attempt]
    url = fresh_storage_url()
    # The race is the creation's: 8 workers starting on 2 cores under coverage can hold a
    # trial's heartbeat past the toy study's 3 s grace, and a trial failed as stale there is
    # the stale sweep's test, not this one's.
    doc = toy_study(unique_name, study={"storage": url, "n_trials": workers, "grace_period_s": 60})
    study = write_study(doc)
    finished = run_gated([["cli", "run", str(study)]] * workers, tmp_path / "gate", cwd=REPO_ROOT)
    failed = [f.output for f in finished if f.returncode != 0]
    assert failed == [], failed
    trials = load_trials(url, unique_name)
    assert len(counted(trials)) == workers
    assert all(t.state.name == "COMPLETE" for t in counted(trials))


def test_an_unreachable_server_is_one_line_and_exit_1(
    write_study: Callable[..., Path], unique_name: str, free_port: int
) -> None:
    url = f"postgresql://alice:s3cret-pw@127.0.0.1:{free_port}/hpo"
    study = write_study(toy_study(unique_name, study={"storage": url}))
    result = dvt_hpo_run(study)
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "study.storage 'postgresql://alice:***@127.0.0.1" in result.stderr
    assert "s3cret-pw" not in result.stdout + result.stderr
    assert not (study.parent / "runs").exists()


def test_several_objectives_and_constraints_on_every_backend(
    storage_url: str, write_study: Callable[..., Path], unique_name: str
) -> None:
    """Directions, stored constraint values and the study's system attrs round-trip through
    each storage; validate reads them back (read-only) and refuses a changed constraint."""
    from tests.tradeoff_study import tradeoff_doc

    doc = tradeoff_doc(unique_name, choices=[0.4, 0.6])
    doc["study"]["storage"] = storage_url
    study = write_study(doc)
    first = dvt_hpo_run(study)
    assert first.returncode == 0, first.stdout + first.stderr
    trials = load_trials(storage_url, unique_name)
    assert {t.params["x"]: (t.values, t.system_attrs["constraints"]) for t in trials} == {
        0.4: (pytest.approx([0.4, 6.0]), [-100.0]),
        0.6: (pytest.approx([0.6, 8.0]), [pytest.approx(100.0)]),
    }
    stored = StudyAt(storage_url, unique_name).load().study
    assert [d.name for d in stored.directions] == ["MAXIMIZE", "MINIMIZE"]
    changed = subprocess.run(
        [
            sys.executable,
            "-m",
            "dvt_hpo",
            "validate",
            str(study),
            "--set",
            "objective.constraints[0].max=400",
        ],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert changed.returncode == 2, changed.stdout + changed.stderr
    assert "constraints size <= 500 -> size <= 400" in changed.stderr
