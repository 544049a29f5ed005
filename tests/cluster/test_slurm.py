"""The job's environment and squeue's durations (dvt_hpo.cluster.slurm)."""

from __future__ import annotations

import pytest

from dvt_hpo.cluster.slurm import SlurmJob, parse_duration_s


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0:45", 45.0),
        ("12:05", 725.0),
        ("1:02:03", 3723.0),
        ("2-01:00:00", 2 * 86400 + 3600.0),
        ("UNLIMITED", None),
        ("NOT_SET", None),
        ("INVALID", None),
        ("17", None),
    ],
)
def test_squeue_durations(text: str, seconds: float | None) -> None:
    assert parse_duration_s(text) == seconds


def test_the_job_an_array_task_runs_in() -> None:
    env = {"SLURM_JOB_ID": "41", "SLURM_ARRAY_JOB_ID": "40", "SLURM_ARRAY_TASK_ID": "1"}
    job = SlurmJob.from_environ(env)
    assert job is not None and job.name == "40_1"
    assert job.attrs() == {
        "slurm_job_id": "41",
        "slurm_worker": "40_1",
        "slurm_array_job_id": "40",
        "slurm_array_task_id": "1",
    }
    single = SlurmJob.from_environ({"SLURM_JOB_ID": "7"})
    assert single is not None and single.name == "7"
    assert single.attrs() == {"slurm_job_id": "7", "slurm_worker": "7"}
    assert SlurmJob.from_environ({}) is None
