"""dvt_hpo.cluster.jobs on a real study database, with Slurm's answers given by hand: the jobs
recorded in the study, the workers ``status`` lists, and ``cancel``'s choice of jobs, its wait
and its lines. The same against a real Slurm: tests/cluster/test_slurm_workers.py."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from dvt_hpo.cluster import jobs, slurm
from dvt_hpo.cluster.jobs import (
    JOBS_ATTR,
    RecordedJob,
    WorkerState,
    cancel_study,
    cancel_study_jobs,
    format_workers,
    record_job,
    recorded_jobs,
    study_workers,
)
from dvt_hpo.cluster.slurm import TaskState
from dvt_hpo.store.opening import OpenStudy, StudyAt
from dvt_hpo.studyfile import load_spec
from tests.conftest import toy_study


class FakeSlurm:
    """What squeue/sacct answer (``answers``: one ``{name: state}`` per call, the last one kept)
    and the jobs scancel was asked to stop."""

    def __init__(self, *answers: dict[str, str], kill_wait_s: float | None = None) -> None:
        self.answers = list(answers) or [{}]
        self.asked: list[list[str]] = []
        self.cancelled: list[list[str]] = []
        self.kill_wait = kill_wait_s

    def task_states(self, job_ids: Iterable[str]) -> dict[str, TaskState]:
        self.asked.append(sorted(job_ids))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return {n: TaskState(n, s, f"node-{n}", "0:42") for n, s in answer.items()}

    def cancel(self, job_ids: Iterable[str]) -> None:
        self.cancelled.append(sorted(job_ids))

    def kill_wait_s(self) -> float | None:
        return self.kill_wait


@pytest.fixture
def fake_slurm(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeSlurm]:
    def install(*answers: dict[str, str], kill_wait_s: float | None = None) -> FakeSlurm:
        fake = FakeSlurm(*answers, kill_wait_s=kill_wait_s)
        monkeypatch.setattr(slurm, "available", lambda: True)
        monkeypatch.setattr(slurm, "task_states", fake.task_states)
        monkeypatch.setattr(slurm, "cancel", fake.cancel)
        monkeypatch.setattr(slurm, "kill_wait_s", fake.kill_wait_s)
        monkeypatch.setattr(jobs, "_POLL_S", 0.01)
        return fake

    return install


@pytest.fixture
def opened(tmp_path: Path) -> OpenStudy:
    return StudyAt(f"sqlite:///{tmp_path}/study.db", "s").create_or_load(["maximize"])


def test_a_recorded_job_is_read_back_with_its_time(storage_url: str, unique_name: str) -> None:
    study = StudyAt(storage_url, unique_name).create_or_load(["maximize"])
    before = datetime.now(timezone.utc).replace(microsecond=0)
    record_job(study.storage, study.study_id, "101", 3, "/logs/a")
    record_job(study.storage, study.study_id, "102", 1, "/logs/b")
    found = recorded_jobs(study.storage, study.study_id)
    assert [(j.job_id, j.workers, j.logs) for j in found] == [
        ("101", 3, "/logs/a"),
        ("102", 1, "/logs/b"),
    ]
    for job in found:
        assert before <= datetime.fromisoformat(job.submitted) <= datetime.now(timezone.utc)


def test_records_that_are_no_jobs_are_left_out(opened: OpenStudy) -> None:
    raw: list[Any] = [
        "123",
        {"job_id": 7},  # written by hand: an id must be a string
        {"workers": 2},
        {"job_id": "55"},  # the fields beside the id have defaults
        {"job_id": "56", "workers": 4, "logs": "/l", "submitted": "2026-01-01T00:00:00+00:00"},
    ]
    opened.storage.set_study_system_attr(opened.study_id, JOBS_ATTR, raw)
    assert recorded_jobs(opened.storage, opened.study_id) == [
        RecordedJob("55", 1, "", ""),
        RecordedJob("56", 4, "/l", "2026-01-01T00:00:00+00:00"),
    ]
    # A new record keeps the readable ones and drops the rest.
    record_job(opened.storage, opened.study_id, "57", 1, "/m")
    kept = opened.storage.get_study_system_attrs(opened.study_id)[JOBS_ATTR]
    assert [j["job_id"] for j in kept] == ["55", "56", "57"]


def test_a_study_without_jobs_has_no_workers_and_cancels_nothing(
    opened: OpenStudy, fake_slurm: Callable[..., FakeSlurm]
) -> None:
    fake = fake_slurm({"1_0": "RUNNING"})
    assert study_workers(opened.storage, opened.study_id) == []
    assert cancel_study_jobs(opened.storage, opened.study_id, out=pytest.fail) == []
    assert fake.asked == [] and fake.cancelled == []


def test_workers_are_listed_by_task_number_with_their_running_trials(
    opened: OpenStudy, fake_slurm: Callable[..., FakeSlurm]
) -> None:
    record_job(opened.storage, opened.study_id, "12", 11, "/l")
    record_job(opened.storage, opened.study_id, "123", 1, "/l")
    states = {f"12_{i}": "RUNNING" for i in (10, 2, 0)} | {"123": "PENDING", "1234_0": "RUNNING"}
    fake = fake_slurm(states)
    running = {"12_2": [9, 4], "123": [1]}
    workers = study_workers(opened.storage, opened.study_id, running)
    assert fake.asked == [["12", "123"]]
    # Numerically (12_10 after 12_2), job by job; 1234_0 belongs to neither job.
    assert [(w.name, w.state, w.running_trials) for w in workers] == [
        ("12_0", "RUNNING", []),
        ("12_2", "RUNNING", [4, 9]),
        ("12_10", "RUNNING", []),
        ("123", "PENDING", [1]),
    ]
    assert (workers[0].node, workers[0].elapsed) == ("node-12_0", "0:42")


def test_workers_slurm_forgot_are_listed_from_the_record(
    opened: OpenStudy, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_job(opened.storage, opened.study_id, "40", 3, "/l")
    record_job(opened.storage, opened.study_id, "41", 1, "/l")
    # Slurm is not installed here: nothing is asked, every worker is UNKNOWN.
    monkeypatch.setattr(slurm, "available", lambda: False)
    workers = study_workers(opened.storage, opened.study_id, {"40_1": [5]})
    assert workers == [
        WorkerState("40_0", "UNKNOWN", "", "", []),
        WorkerState("40_1", "UNKNOWN", "", "", [5]),
        WorkerState("40_2", "UNKNOWN", "", "", []),
        WorkerState("41", "UNKNOWN", "", "", []),
    ]


def test_the_status_lines_say_where_each_worker_runs_and_which_are_gone() -> None:
    assert format_workers([]) == []
    lines = format_workers(
        [
            WorkerState("7_0", "RUNNING", "gpu01", "1:02:03", [3, 8]),
            WorkerState("7_1", "PENDING", "(Priority)", "", []),
            WorkerState("7_2", "UNKNOWN", "", "", []),
        ]
    )
    assert lines == [
        "workers (Slurm):",
        "  7_0          RUNNING      gpu01  1:02:03  trial(s) 3, 8",
        "  7_1          PENDING      (Priority)",
        "  7_2          UNKNOWN      (finished; Slurm no longer reports it)",
    ]


def test_only_jobs_still_queued_or_running_are_cancelled_and_awaited(
    opened: OpenStudy, fake_slurm: Callable[..., FakeSlurm]
) -> None:
    for job_id in ("5", "6", "60", "7"):
        record_job(opened.storage, opened.study_id, job_id, 2, "/l")
    # Job 6 ended; 60 (whose tasks' names start with 6) still runs.
    before = {"5_0": "COMPLETED", "5_1": "TIMEOUT", "6_0": "COMPLETED", "6_1": "FAILED"}
    before |= {"60_0": "RUNNING", "60_1": "COMPLETED", "7_0": "PENDING", "7_1": "PENDING"}
    stopping = {"60_0": "COMPLETING", "7_0": "CANCELLED", "7_1": "CANCELLED"}
    ended = {"60_0": "CANCELLED", "7_0": "CANCELLED", "7_1": "CANCELLED"}
    fake = fake_slurm(before, stopping, ended)
    lines: list[str] = []
    assert cancel_study_jobs(opened.storage, opened.study_id, out=lines.append) == ["60", "7"]
    assert fake.cancelled == [["60", "7"]]
    # Asked once for the study's jobs, then for the cancelled ones until none is active.
    assert fake.asked == [["5", "6", "60", "7"], ["60", "7"], ["60", "7"]]
    assert lines == ["scancel 60 7: the workers stop their trials and record them interrupted"]


def test_nothing_is_cancelled_when_every_job_ended(
    opened: OpenStudy, fake_slurm: Callable[..., FakeSlurm]
) -> None:
    record_job(opened.storage, opened.study_id, "5", 1, "/l")
    fake = fake_slurm({"5": "COMPLETED"})
    assert cancel_study_jobs(opened.storage, opened.study_id, out=pytest.fail) == []
    assert fake.cancelled == []


def test_workers_still_running_after_the_wait_are_named(
    opened: OpenStudy, fake_slurm: Callable[..., FakeSlurm]
) -> None:
    record_job(opened.storage, opened.study_id, "8", 2, "/l")
    fake_slurm({"8_0": "RUNNING", "8_1": "COMPLETING"})
    lines: list[str] = []
    assert cancel_study_jobs(opened.storage, opened.study_id, out=lines.append, wait_s=0.05) == [
        "8"
    ]
    assert lines[1] == (
        "warning: 2 worker(s) still RUNNING after 0 s; `dvt-hpo status` shows when they end"
    )


def test_the_wait_is_the_clusters_kill_wait_and_some_slack(
    opened: OpenStudy, fake_slurm: Callable[..., FakeSlurm], monkeypatch: pytest.MonkeyPatch
) -> None:
    record_job(opened.storage, opened.study_id, "8", 1, "/l")
    monkeypatch.setattr(jobs, "_CANCEL_SLACK_S", 0.0)
    fake_slurm({"8": "RUNNING"}, kill_wait_s=0.05)
    lines: list[str] = []
    cancel_study_jobs(opened.storage, opened.study_id, out=lines.append)
    assert lines[-1].startswith("warning: 1 worker(s) still RUNNING after 0 s")


@pytest.fixture
def study_file(write_study: Callable[..., Path], unique_name: str) -> Path:
    return write_study(toy_study(unique_name))


def test_cancel_names_the_trials_left_running(
    study_file: Path, fake_slurm: Callable[..., FakeSlurm]
) -> None:
    import optuna

    spec = load_spec(study_file)
    study = StudyAt.of(spec).create_or_load(["maximize"])
    record_job(study.storage, study.study_id, "30", 2, "/l")
    record_job(study.storage, study.study_id, "31", 1, "/l")
    attrs = [
        {"slurm_array_job_id": "30", "slurm_job_id": "33"},  # an array task of the cancelled job
        {"slurm_job_id": "31"},  # a single job, not cancelled
        {},  # a trial of `dvt-hpo run` on a machine of its own
    ]
    for user_attrs in attrs:
        running = optuna.trial.TrialState.RUNNING
        study.study.add_trial(optuna.trial.create_trial(state=running, user_attrs=user_attrs))
    fake_slurm({"30_0": "RUNNING", "30_1": "RUNNING", "31": "COMPLETED"}, {})
    lines: list[str] = []
    assert cancel_study(spec, out=lines.append) == ["30"]
    assert lines[1:] == [
        f"cancelled job(s) 30 of study {spec.study.name!r}; their interrupted trials run again "
        "at the next `dvt-hpo submit` or `dvt-hpo run`",
        "trial(s) 0 still RUNNING: their worker was killed before it recorded them; the next "
        "run retries them once their heartbeat is older than "
        f"study.grace_period_s={spec.study.grace_period_s} s",
    ]


def test_cancel_says_when_no_job_of_the_study_is_active(
    study_file: Path, fake_slurm: Callable[..., FakeSlurm]
) -> None:
    spec = load_spec(study_file)
    StudyAt.of(spec).create_or_load(["maximize"])
    fake = fake_slurm()
    lines: list[str] = []
    assert cancel_study(spec, out=lines.append) == []
    assert lines == [f"study {spec.study.name!r}: no Slurm job of it is queued or running"]
    assert fake.asked == []  # no job recorded: Slurm is not asked


def test_cancel_discard_paused_deletes_the_paused_states_once_no_trial_runs(
    tmp_path: Path, fake_slurm: Callable[..., FakeSlurm]
) -> None:
    """``cancel --discard-paused`` (no resume wanted): kept while a trial runs (its worker
    could be continuing one), then every paused state goes and the trial stays pruned."""
    import optuna

    from dvt_hpo.recovery.pause import paused_states
    from tests.recovery.test_pause import complete, paused_trial, spec_of

    spec = spec_of(tmp_path)
    study = StudyAt.of(spec).create_or_load(["maximize"]).study
    complete(study, 0.9, {1: 0.9})
    paused = paused_trial(study, spec, 0.5, {1: 0.8})
    running = study.ask()
    fake_slurm()
    lines: list[str] = []
    cancel_study(spec, out=lines.append, discard_paused=True)
    assert lines[0].startswith(f"paused states kept: trial(s) {running.number} still RUNNING")
    assert [p.number for p in paused_states(spec, study.get_trials())] == [paused]
    study.tell(running, 0.1)
    lines.clear()
    cancel_study(spec, out=lines.append, discard_paused=True)
    assert lines[0].startswith("deleted the paused state of 1 trial(s) (")
    assert paused_states(spec, study.get_trials()) == []
    assert study.trials[paused].state == optuna.trial.TrialState.PRUNED
    lines.clear()
    cancel_study(spec, out=lines.append, discard_paused=True)
    assert lines[0] == f"study {spec.study.name!r}: no paused state to delete"
