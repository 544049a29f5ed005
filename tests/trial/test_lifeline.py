"""The parent-death signal: a process that asked for it dies with its parent, even one killed
by SIGKILL (no ``finally``, no ``atexit`` in the parent to stop it). Real processes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import pytest

from dvt_hpo.process.pids import pid_alive, wait_gone

pytestmark = pytest.mark.processes

# The child asks for the signal, says whether it was set, then would sleep for a minute.
CHILD = (
    "import sys, time; from dvt_hpo.trial.lifeline import set_parent_death_signal; "
    "print(set_parent_death_signal(), flush=True); time.sleep(60)"
)
PARENT = (
    "import subprocess, sys, time; "
    f"child = subprocess.Popen([sys.executable, '-c', {CHILD!r}]); "
    "print(child.pid, flush=True); time.sleep(60)"
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_that_asked_dies_with_its_killed_parent() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert parent.stdout.readline().strip() == "True"  # the child's answer
        assert pid_alive(child)
        parent.kill()
        parent.wait(timeout=30)
        assert wait_gone([child], 10), "the child outlived its parent"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(timeout=30)
