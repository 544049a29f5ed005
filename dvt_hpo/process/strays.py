"""A trial's stray processes: those that left its process group (a child the trainer started
with ``start_new_session=True``, a daemon that called ``setsid``), found and stopped when the
trial ends.

Stopping the trial's process group does not reach them, and once their parent exits they are
children of init, outside the process tree too. What they keep is their environment: every
trial process gets a token of its own in :data:`ENV_TRIAL_TOKEN`, inherited by everything it
starts, and the processes whose environment holds it (read through psutil: ``/proc/PID/environ``
on Linux, the process arguments on macOS; readable for the orchestrator's own user) are the
trial's. A process that clears its environment, or runs as
another user, escapes this; a cgroup per trial would not let it, where the machine allows one
(systemd-run --user --scope): not used here, as most containers do not.

Linux and macOS (psutil); where psutil cannot read a process's environment, it is not found.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Iterable

import psutil

from dvt_hpo.process.pids import pid_alive, wait_gone

__all__ = ["CLOCK_SLACK_S", "ENV_TRIAL_TOKEN", "find_strays", "new_token", "stop_strays"]

ENV_TRIAL_TOKEN = "DVT_HPO_TRIAL_TOKEN"
_KILL_WAIT_S = 10.0
# How much earlier than ``since`` a process's psutil creation time may read (see find_strays).
CLOCK_SLACK_S = 5.0


def new_token() -> str:
    return uuid.uuid4().hex


def find_strays(token: str, exclude: Iterable[int] = (), since: float | None = None) -> list[int]:
    """The live processes whose environment carries ``token`` (never this process).

    ``since`` (``time.time()`` before the token's first carrier started): a process created
    earlier cannot carry it, so its environment is not read (reading every process's costs
    tens of ms per trial on a busy node). The creation times psutil gives are accurate to
    about a second (the boot time is whole seconds): :data:`CLOCK_SLACK_S` earlier still counts.
    """
    skip = {os.getpid(), *exclude}
    oldest = None if since is None else since - CLOCK_SLACK_S
    found: list[int] = []
    for proc in psutil.process_iter():
        if proc.pid in skip:
            continue
        try:
            if oldest is not None and proc.create_time() < oldest:
                continue
            environ = proc.environ()
        except psutil.Error:
            continue  # gone, a zombie, or another user's
        if environ.get(ENV_TRIAL_TOKEN) == token and pid_alive(proc.pid):
            found.append(proc.pid)
    return sorted(found)


def stop_strays(token: str | None, since: float | None = None) -> list[int]:
    """SIGKILL the trial's strays (the trial is over: nothing of it may outlive it) and wait
    until they are gone; their pids. ``since``: as for :func:`find_strays`."""
    if not token:
        return []
    pids = find_strays(token, since=since)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    if pids:
        wait_gone(pids, _KILL_WAIT_S)
    return pids
