"""Processes by pid, read from ``/proc``: whether one is alive, a group's members, a process's
descendants' groups, and waiting until pids are gone. Linux first; where ``/proc`` or pidfds are
missing the answers fall back to signals and polling. Stdlib only (the orchestrator side).
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class _ProcInfo:
    ppid: int
    pgid: int
    state: str


def _proc_table() -> dict[int, _ProcInfo]:
    """Every process's parent, group and state; empty where /proc is missing."""
    table: dict[int, _ProcInfo] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue  # it exited while we looked
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        fields = raw[raw.rfind(b")") + 2 :].split()
        if len(fields) < 3:
            continue
        table[int(name)] = _ProcInfo(int(fields[1]), int(fields[2]), fields[0].decode())
    return table


def _alive(info: _ProcInfo) -> bool:
    # Zombies are dead: only their parent (or init, whenever it gets to it) can reap them.
    return info.state not in ("Z", "X", "x")


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group, from /proc."""
    return [pid for pid, info in _proc_table().items() if info.pgid == pgid and _alive(info)]


def pid_alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return raw[raw.rfind(b")") + 2 : raw.rfind(b")") + 3] not in (b"Z", b"X", b"x")


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
