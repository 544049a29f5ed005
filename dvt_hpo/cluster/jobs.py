"""The Slurm jobs of a study: recorded in the study at submit, listed by ``status``, stopped by
``cancel``.

``submit`` appends each job to the study's system attr ``dvt_hpo:slurm_jobs`` (JSON: job id,
workers, log folder, time), so every machine that reaches the database knows the study's
workers; ``status`` asks Slurm for their state and ``cancel`` scancels those still queued or
running, then waits (bounded by the cluster's KillWait) until they have recorded their running
trials interrupted, each with a WAITING copy that the next ``submit`` or ``run`` runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from dvt_hpo.cluster import slurm

if TYPE_CHECKING:
    from dvt_hpo.spec.model import StudySpec

__all__ = [
    "JOBS_ATTR",
    "cancel_study",
    "RecordedJob",
    "WorkerState",
    "cancel_study_jobs",
    "format_workers",
    "record_job",
    "recorded_jobs",
    "study_workers",
]

JOBS_ATTR = "dvt_hpo:slurm_jobs"
# Extra wait beyond KillWait for a cancelled job to leave RUNNING (slurmctld's own latency).
_CANCEL_SLACK_S = 30.0
_POLL_S = 1.0


@dataclass(frozen=True)
class RecordedJob:
    job_id: str  # the array job id
    workers: int
    logs: str  # the folder of the workers' logs
    submitted: str  # ISO time (UTC)


@dataclass(frozen=True)
class WorkerState:
    """One worker (array task) of the study and what Slurm says of it."""

    name: str  # "123_4"
    state: str  # Slurm's state, or "UNKNOWN" once Slurm forgot a finished job
    node: str
    elapsed: str
    running_trials: list[int]


def recorded_jobs(storage: Any, study_id: int) -> list[RecordedJob]:
    raw = storage.get_study_system_attrs(study_id).get(JOBS_ATTR) or []
    jobs = []
    for item in raw:
        if isinstance(item, dict) and isinstance(item.get("job_id"), str):
            jobs.append(
                RecordedJob(
                    item["job_id"],
                    int(item.get("workers", 1)),
                    str(item.get("logs", "")),
                    str(item.get("submitted", "")),
                )
            )
    return jobs


def record_job(storage: Any, study_id: int, job_id: str, workers: int, logs: str) -> None:
    """Append a submitted job to the study's jobs (read-modify-write: two submits of one study
    at the same instant may lose one record, never a worker)."""
    jobs = [asdict(j) for j in recorded_jobs(storage, study_id)]
    submitted = datetime.now(timezone.utc).isoformat(timespec="seconds")
    jobs.append(asdict(RecordedJob(job_id, workers, logs, submitted)))
    storage.set_study_system_attr(study_id, JOBS_ATTR, jobs)


def study_workers(
    storage: Any, study_id: int, running: Mapping[str, Sequence[int]] | None = None
) -> list[WorkerState]:
    """Every worker of the study's recorded jobs with its Slurm state (``running``: the
    numbers of the study's RUNNING trials by worker name, from their ``slurm_worker``)."""
    jobs = recorded_jobs(storage, study_id)
    if not jobs:
        return []
    states = slurm.task_states(j.job_id for j in jobs) if slurm.available() else {}
    by_worker = running or {}
    workers = []
    for job in jobs:
        names = [name for name in states if name.split("_")[0] == job.job_id]
        if not names:  # Slurm forgot it (MinJobAge passed, no accounting) or is not reachable
            names = (
                [f"{job.job_id}_{i}" for i in range(job.workers)]
                if job.workers > 1
                else [job.job_id]
            )
        for name in sorted(names, key=_task_order):
            task = states.get(name)
            workers.append(
                WorkerState(
                    name,
                    task.state if task else "UNKNOWN",
                    task.node if task else "",
                    task.elapsed if task else "",
                    sorted(by_worker.get(name, [])),
                )
            )
    return workers


def _task_order(name: str) -> tuple[int, int]:
    job, _, task = name.partition("_")
    return (int(job) if job.isdigit() else 0, int(task) if task.isdigit() else -1)


def format_workers(workers: Sequence[WorkerState]) -> list[str]:
    """The ``workers (Slurm):`` lines of ``dvt-hpo status``."""
    if not workers:
        return []
    lines = ["workers (Slurm):"]
    for w in workers:
        where = f"  {w.node}" if w.node else ""
        elapsed = f"  {w.elapsed}" if w.elapsed else ""
        trials = f"  trial(s) {', '.join(map(str, w.running_trials))}" if w.running_trials else ""
        gone = "  (finished; Slurm no longer reports it)" if w.state == "UNKNOWN" else ""
        lines.append(f"  {w.name:<12} {w.state:<11}{where}{elapsed}{trials}{gone}")
    return lines


def cancel_study_jobs(
    storage: Any,
    study_id: int,
    *,
    out: Callable[[str], None],
    wait_s: float | None = None,
) -> list[str]:
    """scancel the study's jobs still queued or running, then wait until none of their tasks
    runs (bounded by KillWait + slack, or ``wait_s``); returns the job ids cancelled."""
    jobs = recorded_jobs(storage, study_id)
    if not jobs:
        return []
    states = slurm.task_states(j.job_id for j in jobs)
    active = sorted(
        {
            j.job_id
            for j in jobs
            for n, s in states.items()
            if n.split("_")[0] == j.job_id and s.active
        }
    )
    if not active:
        return []
    slurm.cancel(active)
    out(f"scancel {' '.join(active)}: the workers stop their trials and record them interrupted")
    if wait_s is None:
        wait_s = (slurm.kill_wait_s() or 30.0) + _CANCEL_SLACK_S
    end = time.monotonic() + wait_s
    left: list[slurm.TaskState] = []
    # Slurm has no event to wait on from here: squeue is asked once a second.
    while time.monotonic() < end:
        left = [s for s in slurm.task_states(active).values() if s.active]
        if not left:
            break
        time.sleep(_POLL_S)
    if left:
        out(
            f"warning: {len(left)} worker(s) still {left[0].state} after {wait_s:.0f} s; "
            "`dvt-hpo status` shows when they end"
        )
    return active


def cancel_study(
    spec: StudySpec, *, out: Callable[[str], None], discard_paused: bool = False
) -> list[str]:
    """``dvt-hpo cancel``: cancel the study's jobs, wait for their workers, say which trials
    run again and which are left RUNNING (a worker killed before it recorded them);
    ``discard_paused`` (no resume wanted): then delete every paused state."""
    from optuna.trial import TrialState

    from dvt_hpo.store.opening import StudyAt

    opened = StudyAt.of(spec).load()
    storage, study_id = opened.storage, opened.study_id
    cancelled = cancel_study_jobs(storage, study_id, out=out)
    if discard_paused:
        _discard_paused(spec, storage, study_id, out=out)
    if not cancelled:
        out(f"study {spec.study.name!r}: no Slurm job of it is queued or running")
        return []
    running = storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
    left = [
        t.number
        for t in running
        if (t.user_attrs.get("slurm_array_job_id") or t.user_attrs.get("slurm_job_id")) in cancelled
    ]
    out(
        f"cancelled job(s) {', '.join(cancelled)} of study {spec.study.name!r}; their "
        "interrupted trials run again at the next `dvt-hpo submit` or `dvt-hpo run`"
    )
    if left:
        out(
            f"trial(s) {', '.join(map(str, left))} still RUNNING: their worker was killed "
            "before it recorded them; the next run retries them once their heartbeat is older "
            f"than study.grace_period_s={spec.study.grace_period_s} s"
        )
    return cancelled


def _discard_paused(
    spec: StudySpec, storage: Any, study_id: int, *, out: Callable[[str], None]
) -> None:
    """``cancel --discard-paused``: every paused state goes once no trial runs (a worker still
    running could be continuing one); a paused trial then stays PRUNED at its last report."""
    from optuna.trial import TrialState

    from dvt_hpo.config.units import format_bytes
    from dvt_hpo.recovery.pause import discard_all, paused_states

    running = storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
    if running:
        numbers = ", ".join(str(t.number) for t in running)
        out(
            f"paused states kept: trial(s) {numbers} still RUNNING; run `dvt-hpo cancel "
            "--discard-paused` again once `dvt-hpo status` shows none running"
        )
        return
    trials = storage.get_all_trials(study_id, deepcopy=False)
    size = sum(p.bytes for p in paused_states(spec, trials))
    gone = discard_all(spec, trials)
    if gone:
        out(
            f"deleted the paused state of {len(gone)} trial(s) ({format_bytes(size)}): "
            "they stay pruned at their last report"
        )
    else:
        out(f"study {spec.study.name!r}: no paused state to delete")
