"""Each trial of a Slurm worker records the job, array job and task it ran in."""

from __future__ import annotations

from dvt_hpo.cluster.observer import SlurmObserver
from dvt_hpo.cluster.slurm import SlurmJob
from dvt_hpo.results.events import TrialStarted


def _started() -> TrialStarted:
    return TrialStarted(number=3, trial_id=4, params={"x": 0.5}, retry_of=None, start_time=0.0)


def test_an_array_tasks_trial_records_the_array_job_and_task() -> None:
    job = SlurmJob.from_environ(
        {"SLURM_JOB_ID": "130", "SLURM_ARRAY_JOB_ID": "123", "SLURM_ARRAY_TASK_ID": "4"}
    )
    assert job is not None
    assert SlurmObserver(job).trial_started(_started()) == {
        "slurm_job_id": "130",
        "slurm_worker": "123_4",
        "slurm_array_job_id": "123",
        "slurm_array_task_id": "4",
    }


def test_a_plain_jobs_trial_records_the_job_alone() -> None:
    job = SlurmJob.from_environ({"SLURM_JOB_ID": "77"})
    assert job is not None
    assert SlurmObserver(job).trial_started(_started()) == {
        "slurm_job_id": "77",
        "slurm_worker": "77",
    }
    assert SlurmJob.from_environ({}) is None  # outside Slurm: no observer to make
