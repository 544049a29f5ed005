"""Processes by pid, read through psutil: whether one is alive, a group's members, a process's
descendants' groups, and waiting until pids are gone. psutil reads ``/proc`` on Linux and the
kernel's process table on macOS, so these answers hold on both; a process group comes from
``os.getpgid``. Waiting is event-driven through pidfds where Linux has them, else it polls.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

# Zombies are dead: only their parent (or init, whenever it gets to it) can reap them.
_DEAD = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


@dataclass(frozen=True)
class _ProcInfo:
    ppid: int
    pgid: int
    state: str


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:  # it exited while we looked (or another user's, where that is refused)
        return None


def _proc_table() -> dict[int, _ProcInfo]:
    """Every live-or-zombie process's parent, group and status."""
    table: dict[int, _ProcInfo] = {}
    for proc in psutil.process_iter(["ppid", "status"]):
        ppid, status = proc.info["ppid"], proc.info["status"]
        pgid = _pgid(proc.pid)
        if ppid is None or status is None or pgid is None:
            continue  # gone, or not ours to read
        table[proc.pid] = _ProcInfo(ppid, pgid, status)
    return table


def _alive(info: _ProcInfo) -> bool:
    return info.state not in _DEAD


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group.

    Runs once per trial: the group of each pid is one system call, and only the few members
    are read further (reading every process's status costs tens of ms on a busy node)."""
    members: list[int] = []
    for pid in psutil.pids():
        if _pgid(pid) != pgid:
            continue
        try:
            if psutil.Process(pid).status() not in _DEAD:
                members.append(pid)
        except psutil.Error:
            continue  # gone, or not ours to read (as the process table leaves it out)
    return members


def pid_alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() not in _DEAD
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # another user's: it exists


def descendant_groups(root_pid: int) -> set[int]:
    """Process groups of the live descendants of ``root_pid`` (torchrun ranks lead their own)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, info in table.items():
        children.setdefault(info.ppid, []).append(pid)
    groups: set[int] = set()
    todo = list(children.get(root_pid, ()))
    while todo:
        pid = todo.pop()
        info = table.get(pid)
        if info is not None and _alive(info):
            groups.add(info.pgid)
        todo.extend(children.get(pid, ()))
    return groups


def wait_gone(pids: Iterable[int], timeout_s: float) -> bool:
    """Wait until every pid has exited (event-driven through pidfds: they need not be our
    children); True when all did within ``timeout_s``."""
    pidfds: list[int] = []
    leftover: list[int] = []
    try:
        for pid in pids:
            try:
                pidfds.append(os.pidfd_open(pid))
            except ProcessLookupError:
                continue
            except (AttributeError, OSError):
                leftover.append(pid)  # no pidfd support: checked by polling below
        deadline = time.monotonic() + timeout_s
        poller = select.poll()
        for fd in pidfds:
            poller.register(fd, select.POLLIN)
        remaining = set(pidfds)
        while remaining:
            wait_ms = max(0, int((deadline - time.monotonic()) * 1000))
            events = poller.poll(wait_ms)
            if not events:
                return False
            for fd, _ in events:
                poller.unregister(fd)
                remaining.discard(fd)
        delay_s = 0.005
        while leftover:
            leftover = [pid for pid in leftover if pid_alive(pid)]
            if not leftover:
                break
            if time.monotonic() >= deadline:
                return False
            time.sleep(delay_s)  # only without pidfd (Linux < 5.3): nothing to wait on
            delay_s = min(delay_s * 2, 0.1)
        return True
    finally:
        for fd in pidfds:
            with contextlib.suppress(OSError):
                os.close(fd)


__all__ = ["descendant_groups", "group_members", "pid_alive", "wait_gone"]
