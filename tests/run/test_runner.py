"""dvt_hpo.run.runner: the launch gate a run gets where it runs (a Slurm job's time limit, or
none), and :func:`run_study` handing its arguments to the loop. The gate's own rule:
tests/cluster/test_time_limit.py; MLflow added by the study file's observers:
tests/tracking/test_mlflow_study.py; run_study in a fresh interpreter: tests/test_cli.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dvt_hpo.cluster import slurm
from dvt_hpo.cluster.time_limit import TimeLimitGate
from dvt_hpo.results.events import BaseObserver, StudyEnded, StudyStarted, TrialFinished
from dvt_hpo.run.runner import run_study, study_runner
from dvt_hpo.spec.model import StudySpec
from dvt_hpo.studyfile import load_spec
from tests.conftest import toy_study

SLURM_VARIABLES = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID")


@pytest.fixture
def spec(write_study: Callable[..., Path], unique_name: str) -> StudySpec:
    return load_spec(write_study(toy_study(unique_name, trials={"stop_grace_s": 7})))


@pytest.fixture
def in_slurm_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as array task 2 of job 70 (its own job id 77), Slurm's commands at hand."""
    for name, value in zip(SLURM_VARIABLES, ("77", "70", "2"), strict=True):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(slurm, "available", lambda: True)


def test_outside_slurm_a_run_has_no_launch_gate(
    spec: StudySpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in SLURM_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert study_runner(spec).launch_gate is None


def test_inside_a_slurm_job_the_gate_is_its_time_limit(spec: StudySpec, in_slurm_job: None) -> None:
    gate = study_runner(spec).launch_gate
    assert isinstance(gate, TimeLimitGate)
    assert (gate.job.job_id, gate.job.name) == ("77", "70_2")  # squeue is asked of its own id
    assert gate.margin_s == spec.trials.stop_grace_s == 7


def test_a_job_where_slurm_cannot_be_asked_has_no_gate(
    spec: StudySpec, in_slurm_job: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(slurm, "available", lambda: False)
    assert study_runner(spec).launch_gate is None


def test_a_given_gate_wins(spec: StudySpec, in_slurm_job: None) -> None:
    def never(study: Any) -> str:
        return "no"

    assert study_runner(spec, launch_gate=never).launch_gate is never


class Recorder(BaseObserver):
    def __init__(self) -> None:
        self.events: list[str] = []

    def study_started(self, event: StudyStarted) -> None:
        self.events.append("started")

    def trial_finished(self, event: TrialFinished) -> None:
        self.events.append(f"trial {event.number} {event.state}")

    def study_ended(self, event: StudyEnded) -> None:
        self.events.append("ended")


@pytest.mark.processes
def test_run_study_takes_overrides_observers_and_retry_failed(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    path = write_study(toy_study(unique_name, study={"n_trials": 5}))
    recorder = Recorder()
    study = run_study(path, ["study.n_trials=1"], observers=[recorder], out=lambda line: None)
    assert [t.state.name for t in study.trials] == ["COMPLETE"]
    assert recorder.events == ["started", "trial 0 COMPLETE", "ended"]
    # Nothing failed, nothing left to run: said and done without a trial.
    again: list[str] = []
    study = run_study(path, ["study.n_trials=1"], retry_failed=True, out=again.append)
    assert "--retry-failed: no failed trial to retry" in again
    assert len(study.trials) == 1
