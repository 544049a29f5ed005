"""A broken node on the real Slurm cluster: the array task whose GPU breaks stops itself and
ends FAILED, naming its host; the other task completes the study with its trials."""

from __future__ import annotations

import socket
from pathlib import Path

import optuna
import pytest

from dvt_hpo.recovery import retries
from tests.cluster.conftest import cluster_study, submit, wait_job_done, write_yaml
from tests.conftest import run_dvt_hpo
from tests.entrypoints.broken_node import BROKEN_ENV, BROKEN_TASK_ENV

pytestmark = pytest.mark.processes


def test_the_broken_array_task_ends_failed_and_the_study_completes(
    slurm_cluster: int,
    postgres_url: str,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # sbatch passes the submitting environment on: task 1's trials find their GPU broken.
    monkeypatch.setenv(BROKEN_ENV, str(tmp_path / "gpu-broke"))
    monkeypatch.setenv(BROKEN_TASK_ENV, "1")
    doc = cluster_study(
        unique_name,
        postgres_url,
        study={"n_trials": 10},
        trainer={
            "entrypoint": "tests.entrypoints.broken_node:run",
            "config": {"curve": [0.1, 0.2, 0.3], "sleep_s": 0.5},
        },
        cluster={"workers": 2},
    )
    path = write_yaml(tmp_path / "study.yaml", doc)
    job = submit(path)
    states = wait_job_done(job, 240)
    assert states == {f"{job}_0": "COMPLETED", f"{job}_1": "FAILED"}, states
    trials = optuna.load_study(study_name=unique_name, storage=postgres_url).get_trials(
        deepcopy=False
    )
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    failed = [t for t in trials if t.state.name == "FAIL"]
    assert len(complete) == 10 and len(retries.counted_numbers(trials)) == 10
    assert len(failed) >= 3
    for t in failed:
        assert t.user_attrs["slurm_worker"] == f"{job}_1"
        assert t.user_attrs["machine_failure"] == "CUDA launch failure"
        (copy,) = [c for c in complete if t.number in retries.retry_history(c)]
        assert copy.params == t.params and copy.user_attrs["slurm_worker"] == f"{job}_0"
    status = run_dvt_hpo("status", str(path), cwd=tmp_path, timeout_s=120)
    assert status.returncode == 0, status.stderr
    host = socket.gethostname()
    assert "stopped workers (node looked broken): 1" in status.stdout, status.stdout
    assert f"{host} (pid " in status.stdout and f"job {job}_1)" in status.stdout
    # The task's own log has the one line naming its host and why.
    logs = "\n".join(p.read_text() for p in tmp_path.rglob(f"{job}_1_*.err"))
    assert f"node {host} looks broken, this worker stops" in logs, sorted(
        str(p) for p in tmp_path.rglob("*")
    )[:50]
