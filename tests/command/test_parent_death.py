"""A command trainer's script dies with its trial process. Real processes.

The trial process dies of its parent-death signal when its parent (the orchestrator, the
torchrun agent) is killed with SIGKILL: no ``finally`` runs, so nothing of it stops the script.
The script asks the kernel for the same signal before it starts (:mod:`dvt_hpo.trial.lifeline`),
so it does not run on as an orphan holding a GPU. The trial here has no control connection:
its watchdog, which kills the process group when the orchestrator's end of the connection
closes, races the parent-death signal and would hide an orphan now and then; this test sees the
parent-death signal alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest

from dvt_hpo.process.pids import pid_alive, wait_gone
from dvt_hpo.studyfile import COMMAND_ENTRYPOINT
from dvt_hpo.wire.payload import CommandPayload, TrialPayload
from dvt_hpo.wire.protocol import ENV_CONTROL
from tests.conftest import REPO_ROOT

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's"),
]

GONE_S = 10.0  # an upper bound: the wait returns as soon as the process is gone
# The script says its pid, then would sleep for two minutes.
SCRIPT = "import os, time; print('script', os.getpid(), flush=True); time.sleep(120)"
# The trial's parent (the orchestrator's part): starts the trial process, says its pid, sleeps.
PARENT = (
    "import subprocess, sys, time; "
    "trial = subprocess.Popen([sys.executable, '-m', 'dvt_hpo.trial', sys.argv[1]]); "
    "print('trial', trial.pid, flush=True); time.sleep(120)"
)


def read_pids(stdout: IO[str], names: set[str]) -> dict[str, int]:
    """The ``NAME PID`` lines of ``names`` on ``stdout``, read as they come (other lines, such
    as the trial's own, are skipped)."""
    pids: dict[str, int] = {}
    while set(pids) != names:
        line = stdout.readline()
        assert line, f"the output ended before {sorted(names - set(pids))} said its pid"
        name, _, pid = line.strip().partition(" ")
        if name in names and pid.isdigit():
            pids[name] = int(pid)
    return pids


def test_a_command_script_dies_with_its_trial_process_when_the_parent_is_killed(
    tmp_path: Path,
) -> None:
    trial_dir = tmp_path / "trial-0000"
    trial_dir.mkdir()
    payload = trial_dir / "payload.json"
    TrialPayload(
        entrypoint=COMMAND_ENTRYPOINT,
        config={},
        trial_number=0,
        trial_dir=str(trial_dir),
        command=CommandPayload(argv=("{python}", "-c", SCRIPT)),
    ).write(payload)
    env = {k: v for k, v in os.environ.items() if k != ENV_CONTROL}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    stderr = tmp_path / "stderr.log"
    with stderr.open("w") as err:
        # A session of its own: the cleanup below kills the parent's group, the trial process
        # and the script included, whatever the test found.
        parent = subprocess.Popen(
            [sys.executable, "-c", PARENT, str(payload)],
            cwd=trial_dir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,
        )
    assert parent.stdout is not None
    try:
        pids = read_pids(parent.stdout, {"trial", "script"})
        assert pid_alive(pids["script"]) and pid_alive(pids["trial"])
        parent.kill()
        assert parent.wait(timeout=GONE_S) == -signal.SIGKILL
        assert wait_gone([pids["trial"]], GONE_S), "the trial process outlived its parent"
        assert wait_gone([pids["script"]], GONE_S), (
            f"the script outlived its trial process:\n{stderr.read_text()}"
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(timeout=GONE_S)
        parent.stdout.close()
