"""A trial's process tree (dvt_hpo.process.tree): exits described, groups stopped, nothing left."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dvt_hpo.process.tree import TrialProcess, describe_exit, group_members, pid_alive

# -- exits and logs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (0, "exit code 0"),
        (3, "exit code 3"),
        (-11, "killed by signal SIGSEGV (-11)"),
        (-9, "killed by signal SIGKILL (-9)"),
        (137, "exit code 137 (128+SIGKILL)"),
        (143, "exit code 143 (128+SIGTERM)"),
        (255, "exit code 255"),
        (None, "still running"),
    ],
)
def test_describe_exit(code: int | None, text: str) -> None:
    assert describe_exit(code) == text


# -- process groups ----------------------------------------------------------------------------


@pytest.fixture
def start_script(tmp_path: Path) -> Callable[[str], tuple[TrialProcess, Callable[[], str]]]:
    """Start a Python script as a trial process; ``ready()`` reads the line it writes to the
    FIFO at $READY (blocking until it does: no polling)."""
    fifo = tmp_path / "ready.fifo"
    os.mkfifo(fifo)
    started: list[TrialProcess] = []

    def start(body: str) -> tuple[TrialProcess, Callable[[], str]]:
        process = TrialProcess.start(
            [sys.executable, "-c", textwrap.dedent(body)],
            env={**os.environ, "READY": str(fifo)},
            cwd=tmp_path,
            stdout_path=tmp_path / "stdout.log",
            stderr_path=tmp_path / "stderr.log",
        )
        started.append(process)

        def ready() -> str:
            with open(fifo) as f:
                return f.readline().strip()

        return process, ready

    yield start  # type: ignore[misc]
    for process in started:
        if process.poll() is None:
            process.stop(0)


READY = """
import os, signal, subprocess, sys, time
def ready(text=""):
    with open(os.environ["READY"], "w") as f:
        f.write(f"{text}\\n")
"""


@pytest.mark.processes
def test_wait_times_out_then_stop_terminates(start_script: Any, tmp_path: Path) -> None:
    process, ready = start_script(READY + "print('hi', flush=True)\nready()\ntime.sleep(60)\n")
    ready()
    assert process.wait(0.05) is None and process.poll() is None
    outcome = process.stop(5)
    assert (outcome.how, outcome.returncode, outcome.all_gone) == ("terminated", -15, True)
    assert outcome.seconds < 5 and process.returncode == -15
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pgid, 0)
    assert (tmp_path / "stdout.log").read_text() == "hi\n"


@pytest.mark.processes
def test_stop_escalates_to_sigkill_when_sigterm_is_ignored(start_script: Any) -> None:
    process, ready = start_script(
        READY + "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nready()\ntime.sleep(60)\n"
    )
    ready()
    outcome = process.stop(0.3)
    assert (outcome.how, outcome.returncode) == ("killed", -int(signal.SIGKILL))
    assert 0.3 <= outcome.seconds < 5


@pytest.mark.processes
def test_leftovers_of_the_group_die_with_the_leader(start_script: Any) -> None:
    process, ready = start_script(
        READY
        + """
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
ready(child.pid)
"""
    )
    child = int(ready())
    assert process.wait(10) == 0
    assert not pid_alive(child)
    assert group_members(process.pgid) == []


@pytest.mark.processes
def test_stop_reaches_descendants_in_their_own_sessions(start_script: Any) -> None:
    # What torchrun does with its ranks: each in a new session, out of the leader's group.
    process, ready = start_script(
        READY
        + """
child = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
)
ready(child.pid)
time.sleep(60)
"""
    )
    child = int(ready())
    assert os.getpgid(child) == child != process.pgid
    outcome = process.stop(5)
    assert outcome.all_gone and not pid_alive(child)


@pytest.mark.processes
def test_stop_after_exit_reports_exited(start_script: Any) -> None:
    process, ready = start_script(READY + "ready()\nsys.exit(5)\n")
    ready()
    assert process.wait(10) == 5
    outcome = process.stop(5)
    assert (outcome.how, outcome.returncode) == ("exited", 5)
