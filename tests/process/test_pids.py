"""Processes by pid through psutil: liveness (zombies are dead), a group's members, the groups
of a process's descendants, and waiting until pids are gone. Real processes throughout."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from dvt_hpo.process.pids import descendant_groups, group_members, pid_alive, wait_gone
from dvt_hpo.process.strays import (
    CLOCK_SLACK_S,
    ENV_TRIAL_TOKEN,
    find_strays,
    new_token,
    stop_strays,
)

pytestmark = pytest.mark.processes

# A leader in a session of its own that starts two children: one in its group, one in a session
# of its own (as torchrun's ranks), prints their pids, then waits for its stdin to close.
LEADER = """
import subprocess, sys
wait = [sys.executable, "-c", "import sys; sys.stdin.read()"]
same = subprocess.Popen(wait, stdin=subprocess.PIPE)
own = subprocess.Popen(wait, stdin=subprocess.PIPE, start_new_session=True)
print(same.pid, own.pid, flush=True)
sys.stdin.read()
same.stdin.close(); own.stdin.close(); same.wait(); own.wait()
"""


@pytest.fixture
def leader() -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", LEADER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    same, own = (int(x) for x in proc.stdout.readline().split())
    try:
        yield proc, same, own
    finally:
        for pid in (same, own, proc.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)
        proc.wait(timeout=30)


def test_a_groups_members_are_its_live_processes(leader) -> None:
    proc, same, own = leader
    assert sorted(group_members(proc.pid)) == sorted([proc.pid, same])
    assert group_members(own) == [own]


def test_descendant_groups_reach_the_children_in_sessions_of_their_own(leader) -> None:
    proc, same, own = leader
    assert descendant_groups(proc.pid) == {proc.pid, own}
    assert descendant_groups(own) == set()


def test_a_zombie_is_dead_and_a_reaped_pid_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    assert pid_alive(os.getpid())
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    assert not pid_alive(child.pid)
    assert wait_gone([child.pid], timeout_s=10)
    child.wait()
    assert not pid_alive(child.pid)


def test_wait_gone_waits_for_the_pids_or_says_it_could_not(leader) -> None:
    proc, same, own = leader
    assert not wait_gone([own], timeout_s=0.2)
    os.kill(own, signal.SIGKILL)
    assert wait_gone([own], timeout_s=10)


def test_strays_are_the_processes_carrying_the_trials_token() -> None:
    token = new_token()
    env = {**os.environ, ENV_TRIAL_TOKEN: token}
    wait = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    stray = subprocess.Popen(wait, stdin=subprocess.PIPE, env=env, start_new_session=True)
    other = subprocess.Popen(wait, stdin=subprocess.PIPE, start_new_session=True)
    try:
        # Popen returns once the child has exec'd: its environment is readable.
        assert find_strays(token) == [stray.pid]
        assert find_strays(token, exclude=[stray.pid]) == []
        assert stop_strays(token) == [stray.pid]
        assert stray.wait(timeout=10) == -signal.SIGKILL
        assert pid_alive(other.pid) and find_strays(token) == []
    finally:
        for p in (stray, other):
            p.kill()
            p.wait(timeout=10)


def test_strays_older_than_since_are_not_read() -> None:
    """A process created before the token's first carrier cannot carry it: its environment
    is not read (what keeps the scan cheap), within psutil's clock slack."""
    token = new_token()
    env = {**os.environ, ENV_TRIAL_TOKEN: token}
    since = time.time()
    wait = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    stray = subprocess.Popen(wait, stdin=subprocess.PIPE, env=env, start_new_session=True)
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
