"""A trial's processes: start them in a session of their own, watch them, stop the whole tree.

No torch: the orchestrator imports this (processes are read through psutil, in
:mod:`dvt_hpo.process.pids`).

Every trial runs in its own session (``start_new_session=True``), so its process group holds the
trial's leader and everything it forks (dataloader workers, ...): a stop signals the whole group,
never the orchestrator. torchrun puts each rank in a session of its own; :meth:`TrialProcess.stop`
finds those through the process tree and stops their groups too. Processes that
left the trial's group and tree (a child started in a session of its own, orphaned) are found
by the trial's token in their environment (:mod:`dvt_hpo.process.strays`) and stopped when it ends.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import select
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from dvt_hpo.process.logcap import LogPump, open_pumped
from dvt_hpo.process.pids import descendant_groups, group_members, pid_alive, wait_gone
from dvt_hpo.process.strays import ENV_TRIAL_TOKEN, stop_strays

if TYPE_CHECKING:
    from dvt_hpo.process.warm import WarmTemplate

# After SIGKILL only an uninterruptible (D-state) process can linger; do not hang on it.
_KILL_WAIT_S = 10.0
# How long a finished trial's log pumps may take to copy what is buffered into their files
# (they no longer wait for end of file: see TrialProcess._drain_logs).
_LOG_DRAIN_S = 5.0


def describe_exit(returncode: int | None) -> str:
    """How a process ended, in words.

    ``"exit code 3"``, ``"killed by signal SIGSEGV (-11)"``, ``"exit code 137 (128+SIGKILL)"``.
    """
    if returncode is None:
        return "still running"
    if returncode < 0:
        return f"killed by signal {_signal_name(-returncode)} ({returncode})"
    if returncode > 128:
        name = _signal_name(returncode - 128, default="")
        if name:
            return f"exit code {returncode} (128+{name})"
    return f"exit code {returncode}"


def _signal_name(number: int, default: str | None = None) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return default if default is not None else f"signal {number}"


# -- the process tree (psutil) ------------------------------------------------------------


def _signal_group(pgid: int, sig: int) -> None:
    if pgid <= 1 or pgid == os.getpgrp():
        return  # never the orchestrator's own group, never "every process"
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


# -- spawning ------------------------------------------------------------------------------


class _Spawner:
    """Starts every child from one long-lived thread.

    A trial process sets ``PR_SET_PDEATHSIG``, which fires when the *thread* that forked it
    exits, not the process: spawning from a thread that lives as long as the orchestrator
    makes it mean "the orchestrator died", whichever thread asked for the start.
    """

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[tuple[dict[str, Any], Future[subprocess.Popen[bytes]]]]
        self._requests = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def popen(self, **kwargs: Any) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="dvt-hpo-spawner", daemon=True
                )
                self._thread.start()
        future: Future[subprocess.Popen[bytes]] = Future()
        self._requests.put((kwargs, future))
        return future.result()

    def _loop(self) -> None:
        while True:
            kwargs, future = self._requests.get()
            try:
                future.set_result(subprocess.Popen(**kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                future.set_exception(exc)


_SPAWNER = _Spawner()


def spawner_popen(**kwargs: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(**kwargs)`` started from the long-lived spawner thread, so that a
    child's parent-death signal means "the orchestrator died"."""
    return _SPAWNER.popen(**kwargs)


@dataclass(frozen=True)
class StopOutcome:
    """How :meth:`TrialProcess.stop` ended a trial."""

    returncode: int
    # exited: it was already over; terminated: it ended within the grace after SIGTERM;
    # killed: it needed SIGKILL.
    how: Literal["exited", "terminated", "killed"]
    seconds: float  # from the stop() call until every process of the trial was gone
    all_gone: bool  # False only if some process survived SIGKILL (uninterruptible sleep)


class _PopenLeader:
    """A leader started by the orchestrator itself (``subprocess.Popen``)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid
        try:
            self._pidfd: int | None = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self._pidfd = None

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    def exited(self, timeout_s: float | None) -> bool:
        """Whether the leader has exited, without reaping it."""
        if self._pidfd is not None:
            # The pidfd stays open until the object dies: closing it while another thread
            # polls it could make that thread poll whatever file reuses the number.
            poller = select.poll()
            poller.register(self._pidfd, select.POLLIN)
            timeout_ms = None if timeout_s is None else max(0, math.ceil(timeout_s * 1000))
            return bool(poller.poll(timeout_ms))
        flags = os.WEXITED | os.WNOWAIT
        if timeout_s is None:
            with contextlib.suppress(ChildProcessError):
                os.waitid(os.P_PID, self.pid, flags)
            return True
        deadline = time.monotonic() + timeout_s
        delay_s = 0.001
        while True:
            try:
                if os.waitid(os.P_PID, self.pid, flags | os.WNOHANG) is not None:
                    return True
            except ChildProcessError:
                return True  # already reaped by a concurrent wait()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(delay_s, remaining))  # only without pidfd: nothing to wait on
            delay_s = min(delay_s * 2, 0.05)

    def reap(self) -> int:
        return self._popen.wait()

    def __del__(self) -> None:
        fd, self._pidfd = getattr(self, "_pidfd", None), None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


class _Leader(Protocol):
    pid: int

    @property
    def returncode(self) -> int | None: ...
    def exited(self, timeout_s: float | None) -> bool: ...
    def reap(self) -> int: ...


def _log_pipes(
    stdout_path: str | os.PathLike[str],
    stderr_path: str | os.PathLike[str],
    log_limit: int | None,
) -> tuple[int, int, list[LogPump]]:
    """Write ends for a trial's stdout and stderr, each copied into its capped log file."""
    Path(stdout_path).parent.mkdir(parents=True, exist_ok=True)
    Path(stderr_path).parent.mkdir(parents=True, exist_ok=True)
    out_fd, out_pump = open_pumped(stdout_path, log_limit, "dvt-hpo-log-out")
    err_fd, err_pump = open_pumped(stderr_path, log_limit, "dvt-hpo-log-err")
    return out_fd, err_fd, [out_pump, err_pump]


class TrialProcess:
    """One trial's leader process and its process group (the leader's pid is the group id).

    The leader is either spawned (``python -m dvt_hpo.worker``, torchrun) or forked by the
    warm template (:mod:`dvt_hpo.process.warm`); both are watched and stopped the same way. Its output
    reaches the log files through pipes, capped at ``log_limit`` bytes per stream
    (:mod:`dvt_hpo.process.logcap`)."""

    def __init__(
        self,
        leader: _Leader,
        pumps: Sequence[LogPump] = (),
        *,
        warm: bool = False,
        token: str | None = None,
        started_unix: float | None = None,
    ):
        self._leader = leader
        self._pumps = list(pumps)
        self.warm = warm
        self.token = token  # ENV_TRIAL_TOKEN: finds the processes that left its group
        self.strays: list[int] = []  # those stopped when it ended
        # time.time() before the leader started: no older process carries the token.
        self.started_unix = started_unix
        self.pid = leader.pid
        self.pgid = leader.pid  # a session of its own: the leader leads its own group
        self.started_s = time.perf_counter()
        self.exited_s: float | None = None  # when the exit was first seen
        self.stop_requested_s: float | None = None
        self.gone_s: float | None = None  # when wait() or stop() saw every process gone
        self._lock = threading.Lock()
        self._cleaned = False

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | os.PathLike[str] | None,
        stdout_path: str | os.PathLike[str],
        stderr_path: str | os.PathLike[str],
        log_limit: int | None = None,
    ) -> TrialProcess:
        """Start ``argv`` in a new session, its output copied into the two log files."""
        out_fd, err_fd, pumps = _log_pipes(stdout_path, stderr_path, log_limit)
        started_unix = time.time()
        try:
            popen = _SPAWNER.popen(
                args=list(argv),
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out_fd,
                stderr=err_fd,
                close_fds=True,
                start_new_session=True,
            )
        finally:
            os.close(out_fd)
            os.close(err_fd)
        return cls(
            _PopenLeader(popen), pumps, token=env.get(ENV_TRIAL_TOKEN), started_unix=started_unix
        )

    @classmethod
    def start_warm(
        cls,
        template: WarmTemplate,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | os.PathLike[str],
        stdout_path: str | os.PathLike[str],
        stderr_path: str | os.PathLike[str],
        log_limit: int | None = None,
    ) -> TrialProcess:
        """Fork ``python -m dvt_hpo.worker *args`` from the warm template (raises
        :class:`~dvt_hpo.process.warm.TemplateUnavailable` when it cannot)."""
        out_fd, err_fd, pumps = _log_pipes(stdout_path, stderr_path, log_limit)
        started_unix = time.time()
        try:
            child = template.spawn(args, env=env, cwd=cwd, stdout_fd=out_fd, stderr_fd=err_fd)
        except BaseException:
            os.close(out_fd)
            os.close(err_fd)
            for pump in pumps:
                pump.join(5)
            raise
        os.close(out_fd)
        os.close(err_fd)
        return cls(
            child, pumps, warm=True, token=env.get(ENV_TRIAL_TOKEN), started_unix=started_unix
        )

    @property
    def returncode(self) -> int | None:
        return self._leader.returncode

    def poll(self) -> int | None:
        """The exit status if the leader has exited (reaped), else None; never blocks."""
        return self.wait(0)

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Wait for the leader to exit; its status, or None on timeout.

        Once the leader has exited, what is left of its group is killed *before* the leader is
        reaped (while the leader is a zombie its group id cannot be reused by another process),
        and waited for: when ``wait`` returns a status, no process of the group is alive and
        the log files hold everything the trial wrote.
        """
        if self._leader.returncode is not None:
            return self._leader.returncode
        if not self._leader.exited(timeout_s):
            return None
        if self.exited_s is None:
            self.exited_s = time.perf_counter()
        with self._lock:
            if not self._cleaned:
                self._cleaned = True
                _signal_group(self.pgid, signal.SIGKILL)
                # The next trial on this slot must not meet this one's dataloader workers
                # (or their GPU memory): wait until they are really gone.
                wait_gone(group_members(self.pgid), _KILL_WAIT_S)
                # And what left the group (its own session) with the trial's token.
                self.strays = stop_strays(self.token, since=self.started_unix)
                if self.gone_s is None:
                    self.gone_s = time.perf_counter()
        code = self._leader.reap()
        self._drain_logs()
        return code

    def _drain_logs(self) -> None:
        """Copy what the trial wrote into its logs, without waiting for end of file: a
        process it left behind that still holds the pipes (another user's, or one not found)
        must not add seconds to the trial."""
        for pump in self._pumps:
            pump.finish()
        deadline = time.monotonic() + _LOG_DRAIN_S
        for pump in self._pumps:
            pump.join(max(0.0, deadline - time.monotonic()))

    def stop(self, grace_s: float) -> StopOutcome:
        """SIGTERM the trial, wait up to ``grace_s``, then SIGKILL; reap; wait until gone.

        The trial is the leader's group and the groups of the leader's descendants that
        started sessions of their own (torchrun ranks).
        """
        t0 = time.perf_counter()
        self.stop_requested_s = t0
        groups = self._targets()
        if self.poll() is not None:
            how: Literal["exited", "terminated", "killed"] = "exited"
            code = self._leader.returncode
            assert code is not None
        else:
            self._signal(groups, signal.SIGTERM)
            code = self.wait(max(0.0, grace_s))
            how = "terminated"
            if code is None:
                how = "killed"
                groups |= self._targets()
                self._signal(groups, signal.SIGKILL)
                code = self.wait(None)
                assert code is not None
        # Whatever survived its leader in other sessions dies now. The leader's own group was
        # cleaned by wait() before the reap; its id may be reused from here on: not signalled.
        groups.discard(self.pgid)
        self._signal(groups, signal.SIGKILL)
        members = {pid for pgid in groups for pid in group_members(pgid)}
        all_gone = wait_gone(members, _KILL_WAIT_S)
        strays = stop_strays(self.token, since=self.started_unix)
        self.strays += [pid for pid in strays if pid not in self.strays]
        self._drain_logs()
        self.gone_s = time.perf_counter()
        return StopOutcome(code, how, self.gone_s - t0, all_gone)

    def _targets(self) -> set[int]:
        groups = {self.pgid}
        if self._leader.returncode is None:
            groups |= descendant_groups(self.pid)
        groups.discard(os.getpgrp())
        return groups

    @staticmethod
    def _signal(groups: set[int], sig: int) -> None:
        for pgid in groups:
            _signal_group(pgid, sig)


__all__ = [
    "StopOutcome",
    "TrialProcess",
    "describe_exit",
    "group_members",
    "pid_alive",
    "wait_gone",
]
