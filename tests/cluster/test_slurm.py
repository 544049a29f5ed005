"""The job's environment and squeue's durations (dvt_hpo.cluster.slurm)."""

from __future__ import annotations

import pytest

from dvt_hpo.cluster.slurm import SlurmJob, parse_duration_s, stop_reason


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


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"JobState": "RUNNING", "PreemptTime": "None"}, None),
        ({"JobState": "CONFIGURING"}, None),
        ({}, None),
        # Preempted during its grace time: still RUNNING.
        (
            {
                "JobState": "RUNNING",
                "StartTime": "2026-12-03T12:15:16",
                "PreemptTime": "2026-12-03T12:15:19",
            },
            "preempted",
        ),
        # In the second it started.
        (
            {
                "JobState": "RUNNING",
                "StartTime": "2026-12-03T12:15:16",
                "PreemptTime": "2026-12-03T12:15:16",
            },
            "preempted",
        ),
        # A requeued job's earlier run was preempted, not this one.
        (
            {
                "JobState": "RUNNING",
                "StartTime": "2026-12-03T12:20:00",
                "PreemptTime": "2026-12-03T12:15:19",
            },
            None,
        ),
        ({"JobState": "CANCELLED", "PreemptTime": "2026-12-03T12:15:19"}, "cancelled"),
        ({"JobState": "TIMEOUT"}, "timed out"),
        ({"JobState": "PENDING"}, "pending"),
    ],
)
def test_why_slurm_stops_a_job(fields: dict[str, str], reason: str | None) -> None:
    assert stop_reason(fields) == reason


def test_a_cluster_without_the_preempting_partition_is_named_not_a_traceback() -> None:
    from tests.cluster.conftest import cluster_problem

    assert cluster_problem("debug*\nurgent\n") is None
    why = cluster_problem("batch*\ngpu\n")
    assert why is not None and "no 'urgent' partition (it has: batch, gpu)" in why
