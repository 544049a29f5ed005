"""``dvt-hpo submit``: the study's workers as one Slurm job array, through submitit.

submitit (the library behind Hydra's Slurm launcher) writes the sbatch script, submits the
array and keeps each task's logs; a hand-written sbatch script would redo its quoting, array
log naming and job-id parsing. Each array task runs :func:`~dvt_hpo.cluster.array_task.run_worker`:
``dvt-hpo run study.yaml`` with the submit's ``--set``s, one worker on the shared study
database. Before submitting, the study is created (or checked against the stored one) here,
so the workers never race to create it and a refused study file fails now, not in N logs; the
job id is recorded in the study for ``status`` and ``cancel``.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dvt_hpo.cluster import slurm
from dvt_hpo.cluster.array_task import WorkerCommand, run_worker
from dvt_hpo.exceptions import DvtHpoError, SpecError
from dvt_hpo.spec.model import ClusterSpec, StudySpec
from dvt_hpo.studyfile.urls import storage_kind
from dvt_hpo.text.redact import redact_url

__all__ = ["Submitted", "check_storage_fit", "sbatch_parameters", "submit_study", "submitted_lines"]

# What a worker needs after Slurm's SIGTERM beyond trials.stop_grace_s: recording its trials.
_RECORD_S = 10.0
# submitit always asks Slurm for a signal before the time limit (USR2 by default). Slurm sends
# it to every process of the job, and USR2 kills a trial process that has no handler for it; the
# worker needs no warning (it checks the time left itself), so the signal is one that every
# process ignores unless it asks for it.
_WARNING_SIGNAL = "URG@60"
# How srun starts each task's Python: with SIGTERM ignored (an ignored signal stays ignored
# across exec) until submitit installs its handler. Slurm's SIGTERM (a preemption, scancel)
# that comes while the task is still starting would otherwise kill it: the task ends FAILED,
# a preempted one is not requeued (Slurm requeues only jobs it has to kill). A SIGTERM missed
# so is asked for: run_worker asks Slurm whether the job is being stopped before it starts
# the worker.
_TASK_PYTHON = f'/bin/sh -c \'trap "" TERM; exec "$0" "$@"\' {shlex.quote(sys.executable)}'


@dataclasses.dataclass(frozen=True)
class Submitted:
    job_id: str
    workers: int
    logs: Path


def check_storage_fit(spec: StudySpec, cluster: ClusterSpec) -> None:
    """Refuse several workers on a SQLite or journal file unless the study file allows it:
    SQLite's WAL needs shared memory that two machines do not share, and file locks are
    local to one machine on most network file systems (exit 2, nothing submitted)."""
    kind = storage_kind(spec.study.storage)
    if kind not in ("sqlite", "journal") or cluster.workers == 1 or cluster.allow_file_storage:
        return
    file, line = spec.locate("study.storage")
    raise SpecError(
        f"{cluster.workers} workers on a {kind} file ({redact_url(spec.study.storage)}) may "
        f"run on several nodes, where {'SQLite' if kind == 'sqlite' else 'a journal file'} on "
        "a shared file system loses or corrupts trials; use PostgreSQL (study.storage: "
        "postgresql://user:${PGPASSWORD}@host/db, pip install 'dvt-hpo[postgres]'), or set "
        "cluster.allow_file_storage: true if every worker runs on one node "
        "(cluster.sbatch: {nodes: 1, nodelist: NODE})",
        file=file,
        line=line,
        field="study.storage",
    )


def sbatch_parameters(spec: StudySpec, cluster: ClusterSpec) -> dict[str, Any]:
    params: dict[str, Any] = {
        "job_name": cluster.job_name or f"dvt-hpo-{spec.study.name}",
        "time": cluster.time_limit,
        "array_parallelism": cluster.workers,
        "additional_parameters": {
            **cluster.sbatch,
            # Preempted (or `scontrol requeue`d) workers go back to the queue only when asked.
            ("requeue" if cluster.requeue else "no-requeue"): True,
            "signal": _WARNING_SIGNAL,
        },
    }
    if cluster.partition is not None:
        params["partition"] = cluster.partition
    if cluster.cpus_per_worker is not None:
        params["cpus_per_task"] = cluster.cpus_per_worker
    if cluster.gpus_per_worker:
        params["gpus_per_node"] = cluster.gpus_per_worker
    if cluster.memory_per_worker is not None:
        params["mem"] = f"{math.ceil(cluster.memory_per_worker / 1024**2)}M"
    if cluster.setup:
        params["setup"] = list(cluster.setup)
    return params


def submit_study(
    spec: StudySpec,
    overrides: Sequence[str],
    *,
    workers: int | None = None,
    allow_space_change: bool = False,
    out: Callable[[str], None] = print,
) -> Submitted:
    """Submit the study's workers; returns the job (its id recorded in the study)."""
    from dvt_hpo.cluster.jobs import record_job
    from dvt_hpo.study.setup import open_for_run

    cluster = spec.cluster or ClusterSpec(logs=spec.trials.runs_dir / "slurm")
    if workers is not None:
        cluster = dataclasses.replace(cluster, workers=workers)
    check_storage_fit(spec, cluster)
    if not slurm.available():
        raise DvtHpoError(
            "sbatch and squeue not found: run dvt-hpo submit on a Slurm login node (or "
            "`dvt-hpo run --workers K` on one machine)"
        )
    try:
        import submitit
    except ImportError:
        raise DvtHpoError("dvt-hpo submit needs submitit: pip install 'dvt-hpo[slurm]'") from None
    kill_wait = slurm.kill_wait_s()
    needed = spec.trials.stop_grace_s + _RECORD_S
    if kill_wait is not None and kill_wait < needed:
        out(
            f"warning: the cluster's KillWait is {kill_wait:g} s, less than trials.stop_grace_s "
            f"+ {_RECORD_S:g} s = {needed:g} s: a worker stopped by Slurm may be killed before "
            "it records its trials (they are then retried once their heartbeat is stale)"
        )
    # Created (or checked) once here: the workers find it and never race to create it.
    opened = open_for_run(spec, allow_space_change=allow_space_change, out=out)
    storage, study_id = opened.storage, opened.study_id
    cluster.logs.mkdir(parents=True, exist_ok=True)
    executor = submitit.SlurmExecutor(folder=cluster.logs, python=_TASK_PYTHON)
    executor.update_parameters(**sbatch_parameters(spec, cluster))
    command = WorkerCommand(
        str(spec.path),
        tuple(overrides),
        cluster.gpus_per_worker,
        allow_space_change,
        requeue=cluster.requeue,
    )
    try:
        with executor.batch():
            jobs = [executor.submit(run_worker, command.to_json()) for _ in range(cluster.workers)]
    except Exception as exc:  # submitit raises a bare RuntimeError/CalledProcessError
        first = " ".join(str(exc).split())[:500]
        raise DvtHpoError(f"sbatch refused the job: {first}") from None
    job_id = str(jobs[0].job_id).split("_")[0]
    record_job(storage, study_id, job_id, cluster.workers, str(cluster.logs))
    return Submitted(job_id, cluster.workers, cluster.logs)


def submitted_lines(spec: StudySpec, submitted: Submitted, overrides: Sequence[str]) -> list[str]:
    """What ``submit`` prints: the job, where its logs go, the next commands."""
    cluster = spec.cluster or ClusterSpec()
    study = shlex.quote(str(spec.path))
    sets = "".join(f" --set {shlex.quote(o)}" for o in overrides)
    tasks = (
        f"array {submitted.job_id}_[0-{submitted.workers - 1}]"
        if submitted.workers > 1
        else "one job"
    )
    hours, minutes = divmod(cluster.time_limit, 60)
    return [
        f"submitted job {submitted.job_id}: {submitted.workers} worker(s) of study "
        f"{spec.study.name!r} ({tasks}), time limit {hours}:{minutes:02d}:00 each, on "
        f"{redact_url(spec.study.storage)}",
        f"logs: {submitted.logs}/{submitted.job_id}{'_<task>' if submitted.workers > 1 else ''}"
        "_0_log.out and .err "
        f"(trial logs: {spec.trials.runs_dir}/<trial>/)",
        f"next: dvt-hpo status {study}{sets}    (trials and the workers' Slurm state)",
        f"      dvt-hpo dashboard {study}{sets}",
        f"      dvt-hpo cancel {study}{sets}    (stop the workers; their running trials are "
        "retried by the next submit)",
    ]
