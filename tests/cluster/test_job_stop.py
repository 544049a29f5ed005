"""A scheduler stopping a job signals every process of it (Slurm's time limit, preemption and
scancel, a Kubernetes pod's deletion): the trial processes (and the warm template they die
with) may end before their worker has flagged the interrupt. The trial is still recorded
interrupted, with a copy the next run retries. No Slurm needed: the signals are sent here."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from dvt_hpo.process import tree as process_tree
from tests.orchestrator import (
    EVENT_TIMEOUT_S,
    Orchestrator,
    fifo_study,
    load_trials,
    processes_mentioning,
    states,
    wait_trial_running,
)


def descendants(root: int) -> list[int]:
    """Every live descendant of ``root`` (what Slurm's process tracking signals)."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = Path("/proc", name, "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(name)] = int(fields[1])
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return [pid for pid in found if process_tree.pid_alive(pid)]


@pytest.mark.processes
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_a_trial_stopped_just_before_its_worker_is_recorded_interrupted(
    tmp_path: Path, write_study: Callable[..., Path], unique_name: str, warm: bool
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    study = write_study(fifo_study(unique_name, fifo, study={"n_trials": 1}, trials={"warm": warm}))
    run = Orchestrator(study)
    try:
        wait_trial_running(fifo)
        children = descendants(run.proc.pid)
        assert children
        for pid in children:  # the trial (and the warm template) first ...
            os.kill(pid, signal.SIGTERM)
        assert process_tree.wait_gone(children, EVENT_TIMEOUT_S)
        run.proc.send_signal(signal.SIGTERM)  # ... then its worker
        code, out = run.finish()
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
            run.finish()
    assert code == 130, out
    assert processes_mentioning(tmp_path.resolve() / "runs") == []
    trials = load_trials(study)
    assert states(trials) == [(0, "FAIL"), (1, "WAITING")], out
    assert trials[0].user_attrs["status"] == "interrupted", out
    assert trials[1].params == trials[0].params
