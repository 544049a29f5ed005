"""A trial's strays: the processes that left its process group but still carry its token in
their environment, found and stopped through psutil. Real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from dvt_hpo.process.pids import pid_alive
from dvt_hpo.process.strays import (
    CLOCK_SLACK_S,
    ENV_TRIAL_TOKEN,
    find_strays,
    new_token,
    stop_strays,
)

pytestmark = pytest.mark.processes

# The child says it runs, then waits: Popen returns at exec's point of no return (its
# close-on-exec pipe closes), before the kernel has set up the new program's environment, so a
# read of /proc/<pid>/environ right then can find it empty (a CI run under load did).
WAIT = [sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.read()"]


def _started(env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        WAIT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def test_strays_are_the_processes_carrying_the_trials_token() -> None:
    token = new_token()
    env = {**os.environ, ENV_TRIAL_TOKEN: token}
    stray, other = _started(env), _started()
    try:
        assert find_strays(token) == [stray.pid]
        assert find_strays(token, exclude=[stray.pid]) == []
        assert stop_strays(token) == [stray.pid]
        assert stray.wait(timeout=10) == -signal.SIGKILL
        assert pid_alive(other.pid) and find_strays(token) == []
    finally:
        for p in (stray, other):
            p.kill()
            p.wait(timeout=10)


def test_no_token_no_strays_and_each_trial_its_own_token(monkeypatch: pytest.MonkeyPatch) -> None:
    assert stop_strays(None) == [] and stop_strays("") == []
    assert new_token() != new_token()
    # This process never counts, whatever its environment says.
    token = new_token()
    monkeypatch.setenv(ENV_TRIAL_TOKEN, token)
    assert find_strays(token) == []


def test_strays_older_than_since_are_not_read() -> None:
    """A process created before the token's first carrier cannot carry it: its environment
    is not read (what keeps the scan cheap), within psutil's clock slack."""
    token = new_token()
    env = {**os.environ, ENV_TRIAL_TOKEN: token}
    since = time.time()
    stray = _started(env)
    try:
        assert find_strays(token, since=since) == [stray.pid]
        # A process that started within the slack before ``since`` still counts.
        assert find_strays(token, since=since + CLOCK_SLACK_S / 2) == [stray.pid]
        assert find_strays(token, since=time.time() + 2 * CLOCK_SLACK_S) == []
        assert stop_strays(token, since=time.time() + 2 * CLOCK_SLACK_S) == []
        assert stop_strays(token, since=since) == [stray.pid]
        assert stray.wait(timeout=10) == -signal.SIGKILL
    finally:
        stray.kill()
        stray.wait(timeout=10)
