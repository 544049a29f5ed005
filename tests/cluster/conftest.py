"""The real Slurm cluster of the tests (``tests/cluster/slurm_up.sh`` starts one on this
machine) and helpers to submit a study to it and wait for its jobs."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from dvt_hpo.cluster.slurm import ACTIVE_STATES
from tests.conftest import run_dvt_hpo, toy_study

SLURM_UP = Path(__file__).resolve().parent / "slurm_up.sh"


@pytest.fixture(scope="session")
def slurm_cluster() -> int:
    """The node's CPU count once the cluster answers; skips without Slurm (fails instead
    under DVT_HPO_REQUIRE_SLURM=1, as in CI)."""
    import shutil

    why = None
    if shutil.which("sinfo") is None:
        why = "Slurm is not installed (apt-get install slurm-wlm munge; tests/cluster/slurm_up.sh)"
    else:
        done = subprocess.run(
            ["sinfo", "-h", "-o", "%T %c"], capture_output=True, text=True, timeout=30
        )
        state = done.stdout.split()
        if done.returncode != 0 or not state or not state[0].startswith(("idle", "mix", "alloc")):
            why = f"no Slurm node up ({' '.join((done.stderr or done.stdout).split())[:200]}); run {SLURM_UP}"
    if why is not None:
        if os.environ.get("DVT_HPO_REQUIRE_SLURM") == "1":
            pytest.fail(why + " (DVT_HPO_REQUIRE_SLURM=1)")
        pytest.skip(why)
    return int(state[1].rstrip("+"))


PREEMPTING_PARTITION = "urgent"


def cluster_problem(partitions: str) -> str | None:
    """Why a cluster whose ``sinfo -h -o %P`` lists ``partitions`` cannot run the preemption
    tests (None when it can): they submit a job to the partition that preempts the workers'."""
    names = [p.rstrip("*") for p in partitions.split()]
    if PREEMPTING_PARTITION in names:
        return None
    return (
        f"this Slurm cluster has no {PREEMPTING_PARTITION!r} partition (it has: "
        f"{', '.join(names) or 'none'}): the preemption tests need one whose jobs preempt the "
        f"default partition's, as the cluster of {SLURM_UP} has"
    )


@pytest.fixture(scope="session")
def preempting_cluster(slurm_cluster: int) -> int:
    """:func:`slurm_cluster`, checked to have the partition that preempts (skips, or fails
    under DVT_HPO_REQUIRE_SLURM=1, naming what is missing)."""
    done = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    why = cluster_problem(done.stdout)
    if why is not None:
        if os.environ.get("DVT_HPO_REQUIRE_SLURM") == "1":
            pytest.fail(why + " (DVT_HPO_REQUIRE_SLURM=1)")
        pytest.skip(why)
    return slurm_cluster


def cluster_study(name: str, storage: str, **sections: Any) -> dict[str, Any]:
    """A toy study on PostgreSQL for Slurm workers (one CPU and 512 MiB each)."""
    doc = toy_study(name, **sections)
    doc["study"]["storage"] = storage
    doc.setdefault("cluster", {})
    doc["cluster"] = {"time_limit": 5, "cpus_per_worker": 1, "memory_per_worker": "512MiB"} | (
        doc["cluster"]
    )
    return doc


def submit(path: Path, *args: str) -> str:
    """``dvt-hpo submit``; the job id it printed."""
    done = run_dvt_hpo("submit", path, *args, cwd=path.parent, timeout_s=120)
    assert done.returncode == 0, done.stdout + done.stderr
    match = re.search(r"^submitted job (\d+):", done.stdout, re.MULTILINE)
    assert match is not None, done.stdout
    return match[1]


def job_states(job_id: str) -> dict[str, str]:
    """``{task: state}`` of every task of ``job_id``."""
    done = subprocess.run(
        ["squeue", "-h", "-r", "--states=all", "-j", job_id, "-o", "%i %T"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return dict(line.split() for line in done.stdout.splitlines() if line.strip())


def scontrol_job(job_id: str) -> dict[str, str]:
    done = subprocess.run(
        ["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=30
    )
    return dict(p.split("=", 1) for p in done.stdout.split() if "=" in p)


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll ``predicate`` (Slurm and the database have no event to await from here) until it
    returns something true; fail naming ``what`` after ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.5)


def wait_job_done(job_id: str, timeout_s: float) -> dict[str, str]:
    def done() -> dict[str, str] | None:
        states = job_states(job_id)
        return states if states and not (set(states.values()) & ACTIVE_STATES) else None

    return wait_until(done, timeout_s, f"Slurm job {job_id} to end")


def preempt(job_id: str, cpus: int) -> None:
    """Preempt the worker ``job_id`` (on the partition that allows it) with an urgent job that
    needs ``cpus``, the whole node; return once Slurm requeued it and the urgent job ended, the
    worker's hold lifted."""
    submitted = subprocess.run(
        ["sbatch", "--parsable", "-p", PREEMPTING_PARTITION, "-c", str(cpus), "--mem=64M"]
        # Two seconds, not `true`: a worker requeued in the second the urgent job ends restarts
        # in that same second, and Slurm ends a restart that begins in the second of the
        # requeue FAILED at once, run time 0 (a real cluster holds a requeued job 2 minutes).
        + ["-o", "/dev/null", "--wrap", "sleep 2"],
        timeout=30,
        capture_output=True,
        text=True,
    )
    if submitted.returncode != 0:  # sbatch's own words, not a 100-line CalledProcessError
        pytest.fail(f"sbatch of the preempting job failed: {' '.join(submitted.stderr.split())}")
    urgent = submitted.stdout.strip()
    wait_until(
        lambda: (
            (info := scontrol_job(job_id)).get("Restarts") == "1"
            and info.get("Reason") == "BeginTime"
        ),
        60,
        "the worker to be requeued",
    )
    # Once its hold is lifted the worker may start again before the urgent job did (under
    # load, Slurm's backfill starts a preemptible job where the urgent one waits for the node),
    # and then it is preempted a second time: a different test. The urgent job ends first.
    wait_until(lambda: job_states(urgent).get(urgent) == "COMPLETED", 60, "the urgent job to end")
    # The hold below is lifted only once the preempted run's processes are gone from the node:
    # a run restarted while the last one's batch script still ends takes that script's exit
    # status (the same job id) and ends FAILED with a run time of 0 (seen in CI). On a real
    # cluster the two-minute hold keeps them apart.
    wait_until(lambda: not _has_processes(job_id), 60, "the preempted run's processes to end")
    wait_until(lambda: not _completing(job_id), 60, "the preempted run to finish completing")
    # Slurm holds a requeued job for two minutes (BeginTime); an admin's `StartTime=now` lifts
    # the hold so that the test does not wait.
    subprocess.run(
        ["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True, timeout=30
    )


def _has_processes(job_id: str) -> bool:
    """Whether a process of ``job_id`` still runs on this node (``scontrol listpids`` exits 1
    once none does)."""
    done = subprocess.run(
        ["scontrol", "listpids", job_id], capture_output=True, text=True, timeout=30
    )
    return done.returncode == 0


def _completing(job_id: str) -> bool:
    """Whether Slurm still completes a run of ``job_id`` (its epilog, its node's record of it):
    the job's or the node's state says COMPLETING."""
    job = subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=30
    )
    nodes = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=30)
    return "COMPLETING" in job.stdout.upper() or "COMPLETING" in nodes.stdout.upper()


def write_yaml(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
