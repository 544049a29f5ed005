"""What each array task of ``dvt-hpo submit`` runs: ``dvt-hpo run study.yaml --set ...``, one
worker (orchestrator), in the task's own process.

submitit pickles the function it runs; here that is :func:`run_worker` (by reference) and one
JSON string (:class:`WorkerCommand`), so nothing but plain data crosses to the node. The task
takes over the signals submitit set up for itself: SIGTERM (scancel, time limit, preemption)
interrupts the worker, which stops its trials and records them interrupted with their retry
copies within the cluster's KillWait. (submitit's own "time limit near" signal is replaced by
one every process ignores: see :mod:`dvt_hpo.cluster.submit`.) A worker preempted with
``cluster.requeue`` requeues itself.
"""

from __future__ import annotations

import json
import signal
import sys
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dvt_hpo.cluster.slurm import SlurmJob

__all__ = ["WorkerCommand", "WorkerFailed", "run_worker", "worker_overrides"]


@dataclass(frozen=True)
class WorkerCommand:
    study: str  # the study file, absolute
    overrides: tuple[str, ...]  # the submit's --set, in order
    gpus_per_worker: int
    allow_space_change: bool = False
    requeue: bool = False  # cluster.requeue: a preempted worker goes back to the queue

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerCommand:
        data = json.loads(text)
        data["overrides"] = tuple(data["overrides"])
        return cls(**data)


class WorkerFailed(RuntimeError):
    """The worker ended with a non-zero exit code (the job is then FAILED in Slurm)."""


def worker_overrides(command: WorkerCommand, visible_gpus: list[str]) -> list[str]:
    """The worker's ``--set``s: the submit's, then ``trials.devices`` from what Slurm gave
    the task: its GPUs (by index among the visible ones), or the CPU when it asked for none
    (a node's GPUs that Slurm did not give this task are another job's)."""
    sets = list(command.overrides)
    if command.gpus_per_worker > 0:
        sets.append(f"trials.devices={len(visible_gpus) or command.gpus_per_worker}")
    else:
        sets.append("trials.devices=cpu")
    return sets


def _requeue_if_preempted() -> None:
    """Requeue this job when the SIGTERM was Slurm's preemption: the worker stopped cleanly
    within the grace, so Slurm would record it COMPLETED and not requeue it itself."""
    from dvt_hpo.cluster import slurm

    job = slurm.SlurmJob.from_environ()
    if job is not None and slurm.preempted(job.job_id):
        _requeue(job)


def _requeue(job: SlurmJob) -> None:
    """Requeue this preempted job (``cluster.requeue``), saying so in its log."""
    from dvt_hpo.cluster import slurm

    try:
        slurm.requeue(job.job_id)
    except slurm.SlurmError as exc:
        print(f"preempted, but not requeued: {exc}", file=sys.stderr, flush=True)
        return
    print(
        f"preempted: job {job.name} requeued (cluster.requeue); its interrupted trials run "
        "again when it restarts",
        flush=True,
    )


def _stopped_before_start(requeue: bool) -> bool:
    """Whether Slurm began stopping this job before its worker started (then it does not
    start; a preempted one with ``cluster.requeue`` is requeued). A SIGTERM that came while
    the task was still starting found no worker to stop: the task's Python ignores it until
    submitit's handler, which only logs it (see :mod:`dvt_hpo.cluster.submit`), so Slurm is
    asked. A Slurm that does not answer lets the worker start."""
    from dvt_hpo.cluster import slurm

    job = slurm.SlurmJob.from_environ()
    if job is None:
        return False
    try:
        reason = slurm.stop_reason(slurm.job_fields(job.job_id))
    except slurm.SlurmError as exc:
        print(f"worker: could not ask Slurm about job {job.name}: {exc}", file=sys.stderr)
        return False
    if reason is None:
        return False
    print(
        f"worker: job {job.name} was {reason} before its worker started: none started", flush=True
    )
    if reason == "preempted" and requeue:
        _requeue(job)
    return True


def run_worker(command_json: str) -> int:
    """Run one worker of the study, a plain ``dvt-hpo run`` process; raise
    :class:`WorkerFailed` when it fails (exit 1 or 2), so that Slurm reports the task FAILED."""
    import subprocess

    from dvt_hpo.devices.slots import visible_gpus
    from dvt_hpo.study.loop import EXIT_INTERRUPTED

    command = WorkerCommand.from_json(command_json)
    argv = ["run", command.study]
    for text in worker_overrides(command, visible_gpus()):
        argv += ["--set", text]
    if command.allow_space_change:
        argv.append("--allow-space-change")
    # Slurm signals every process of the job (scancel, time limit, preemption): the worker
    # gets its own SIGTERM and records its trials; this task only waits for it. A Python
    # handler, unlike SIG_IGN, is not inherited by the worker.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    # From here a SIGTERM reaches the worker (or kills it before its handler: handled below);
    # one that came earlier is asked for.
    if _stopped_before_start(command.requeue):
        return EXIT_INTERRUPTED
    print(f"worker: dvt-hpo {' '.join(argv)}", flush=True)
    code = subprocess.call([sys.executable, "-m", "dvt_hpo", *argv])
    if code == -signal.SIGTERM:  # stopped before its run installed its own handler
        code = EXIT_INTERRUPTED
    if code == EXIT_INTERRUPTED and command.requeue:
        _requeue_if_preempted()
    # Stopped by Slurm (scancel, time limit, preemption): its state already says so, and the
    # trials are recorded; a traceback in the log would only alarm.
    if code not in (0, EXIT_INTERRUPTED):
        raise WorkerFailed(f"dvt-hpo run exited with {code}")
    return code
