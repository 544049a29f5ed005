"""Slurm from the outside (``squeue``, ``sacct``, ``scancel``, ``scontrol``) and from the
inside (the job's environment variables).

Stdlib only. Every command runs with a bounded timeout; a Slurm that does not answer is one
line of :class:`SlurmError`, never a traceback. Accounting (``sacct``) is optional: clusters
without a database still answer ``squeue`` for jobs finished less than ``MinJobAge`` ago.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from dvt_hpo.exceptions import DvtHpoError

__all__ = [
    "ACTIVE_STATES",
    "SlurmError",
    "SlurmJob",
    "TaskState",
    "available",
    "cancel",
    "job_fields",
    "kill_wait_s",
    "parse_duration_s",
    "preempted",
    "requeue",
    "stop_reason",
    "task_states",
    "time_left_s",
]

_TIMEOUT_S = 30
# Job states in which a worker may still run or start again.
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    }
)


class SlurmError(DvtHpoError):
    """A Slurm command is missing, failed or did not answer."""


@dataclass(frozen=True)
class SlurmJob:
    """Where this process runs, from the variables Slurm sets in a job."""

    job_id: str  # SLURM_JOB_ID: unique per array task
    array_job_id: str | None  # SLURM_ARRAY_JOB_ID: the same for every task of the array
    array_task_id: str | None  # SLURM_ARRAY_TASK_ID
    host: str

    @classmethod
    def from_environ(cls, env: Mapping[str, str] | None = None) -> SlurmJob | None:
        """The job this process runs in, None outside Slurm."""
        env = os.environ if env is None else env
        job_id = env.get("SLURM_JOB_ID")
        if not job_id:
            return None
        return cls(
            job_id=job_id,
            array_job_id=env.get("SLURM_ARRAY_JOB_ID") or None,
            array_task_id=env.get("SLURM_ARRAY_TASK_ID") or None,
            host=socket.gethostname(),
        )

    @property
    def name(self) -> str:
        """``123_4`` for array task 4 of array job 123 (as squeue shows it), else the job id."""
        if self.array_job_id and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return self.job_id

    def attrs(self) -> dict[str, str]:
        """What each trial records about where it runs (user attrs)."""
        attrs = {"slurm_job_id": self.job_id, "slurm_worker": self.name}
        if self.array_job_id:
            attrs["slurm_array_job_id"] = self.array_job_id
        if self.array_task_id is not None:
            attrs["slurm_array_task_id"] = self.array_task_id
        return attrs


@dataclass(frozen=True)
class TaskState:
    """One job or array task as Slurm reports it."""

    name: str  # "123_4" (array task) or "123"
    state: str  # RUNNING, PENDING, COMPLETED, CANCELLED, TIMEOUT, PREEMPTED, ...
    node: str  # the node it runs on, or why it waits ("(Priority)")
    elapsed: str  # as squeue writes it, "" when unknown

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES


def available() -> bool:
    """Whether Slurm's client commands are installed here."""
    return shutil.which("squeue") is not None and shutil.which("sbatch") is not None


def _run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    if shutil.which(argv[0]) is None:
        raise SlurmError(f"{argv[0]} not found: run this where the Slurm commands are installed")
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]} did not answer within {_TIMEOUT_S} s") from None
    if check and done.returncode != 0:
        message = " ".join((done.stderr or done.stdout).split()) or f"exit {done.returncode}"
        raise SlurmError(f"{' '.join(argv[:2])} failed: {message}")
    return done


def task_states(job_ids: Iterable[str]) -> dict[str, TaskState]:
    """``{name: state}`` of every task of ``job_ids`` (array jobs expanded, one per task):
    from ``squeue`` for the jobs Slurm still holds, then ``sacct`` where accounting is on."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    states: dict[str, TaskState] = {}
    done = _run(
        ["squeue", "-h", "-r", "--states=all", "-j", ",".join(ids), "-o", "%i|%T|%R|%M"],
        check=False,
    )
    if done.returncode == 0:
        for line in done.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 4:
                states[parts[0]] = TaskState(parts[0], parts[1], parts[2], parts[3])
    # squeue forgets finished jobs after MinJobAge; accounting remembers them (when it is on).
    known_arrays = {name.split("_")[0] for name in states}
    missing = [i for i in ids if i not in known_arrays and i not in states]
    if missing and shutil.which("sacct"):
        acct = _run(
            [
                "sacct",
                "-n",
                "-P",
                "-X",
                "-j",
                ",".join(missing),
                "-o",
                "JobID,State,NodeList,Elapsed",
            ],
            check=False,
        )
        if acct.returncode == 0:
            for line in acct.stdout.splitlines():
                parts = line.strip().split("|")
                if len(parts) == 4 and parts[0]:
                    state = parts[1].split()[0]  # "CANCELLED by 0" -> CANCELLED
                    states[parts[0]] = TaskState(parts[0], state, parts[2], parts[3])
    return states


def cancel(job_ids: Iterable[str]) -> None:
    """``scancel`` the jobs (every task of an array job id): SIGTERM, then SIGKILL after the
    cluster's KillWait."""
    ids = sorted(set(job_ids))
    if ids:
        _run(["scancel", *ids])


def stop_reason(fields: Mapping[str, str]) -> str | None:
    """Why Slurm is stopping a job now, from ``scontrol -o show job``'s fields: "preempted"
    (``PreemptTime`` set in this run: not before its ``StartTime``, should a Slurm keep a
    requeued job's), "cancelled", "timed out", or another state the job is leaving RUNNING
    for, lower-cased; None while it runs (or when the fields say nothing)."""
    state = fields.get("JobState", "")
    if state in ("CANCELLED", "TIMEOUT"):
        return "cancelled" if state == "CANCELLED" else "timed out"
    preempt_time = fields.get("PreemptTime", "None")
    if preempt_time not in ("None", "Unknown", ""):
        start = fields.get("StartTime", "")
        # ISO 8601 times of one clock compare as text.
        if not start or start in ("None", "Unknown") or preempt_time >= start:
            return "preempted"
    if state in ("", "RUNNING", "CONFIGURING", "COMPLETING"):
        return None
    return state.lower()


def job_fields(job_id: str) -> dict[str, str]:
    """``scontrol -o show job``'s ``Key=Value`` fields; raises :class:`SlurmError` when it
    fails."""
    done = _run(["scontrol", "-o", "show", "job", job_id])
    return dict(part.split("=", 1) for part in done.stdout.split() if "=" in part)


def preempted(job_id: str) -> bool:
    """Whether Slurm is preempting ``job_id`` now (not cancelling it nor timing it out): a
    worker that stops cleanly within the grace would otherwise end COMPLETED, and Slurm
    requeues only jobs it has to kill. False when scontrol does not answer."""
    try:
        return stop_reason(job_fields(job_id)) == "preempted"
    except SlurmError:
        return False


def requeue(job_id: str) -> None:
    """``scontrol requeue``: the job is stopped (SIGTERM) and queued again."""
    _run(["scontrol", "requeue", job_id])


_DURATION_RE = re.compile(r"^(?:(?P<days>\d+)-)?(?P<rest>\d+(?::\d+){0,2})$")


def parse_duration_s(text: str) -> float | None:
    """Seconds in squeue's ``%L``/``%M`` forms (``D-HH:MM:SS``, ``HH:MM:SS``, ``MM:SS``); None
    for ``UNLIMITED``, ``NOT_SET``, ``INVALID`` or anything else."""
    match = _DURATION_RE.match(text.strip())
    if match is None:
        return None
    parts = [int(p) for p in match["rest"].split(":")]
    if match["days"] is None and len(parts) == 1:
        return None  # a bare number is not a form squeue writes
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, seconds = parts
    return float(((int(match["days"] or 0) * 24 + hours) * 60 + minutes) * 60 + seconds)


def time_left_s(job_id: str) -> float | None:
    """Seconds before ``job_id`` reaches its time limit; None when it has none (or Slurm
    does not say)."""
    done = _run(["squeue", "-h", "-j", job_id, "-o", "%L"], check=False)
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return parse_duration_s(done.stdout.strip().splitlines()[0])


def kill_wait_s() -> float | None:
    """The cluster's KillWait (seconds between SIGTERM and SIGKILL), None when unknown."""
    try:
        done = _run(["scontrol", "show", "config"], check=False)
    except SlurmError:
        return None
    match = re.search(r"^KillWait\s*=\s*(\d+)", done.stdout, re.MULTILINE)
    return float(match[1]) if match else None
