"""Trial processes: the command line, the environment, the device slot, and the process group.

Stdlib only: the orchestrator imports this and must never import torch.

Every trial runs in its own session (``start_new_session=True``), so its process group holds the
trial's leader and everything it forks (dataloader workers, ...): a stop signals the whole group,
never the orchestrator. torchrun puts each rank in a session of its own; :meth:`TrialProcess.stop`
finds those through the process tree (``/proc``) and stops their groups too.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dvt_hpo.exceptions import SpecError
from dvt_hpo.protocol import ENV_CONTROL, ENV_MEMORY_LIMIT

WORKER_MODULE = "dvt_hpo.worker"

# Variables of a torchrun context: an orchestrator started under torchrun must not hand them
# to its trials, or every trial process would believe it is some rank of a foreign job.
_DISTRIBUTED_ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_NAME",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)

# After SIGKILL only an uninterruptible (D-state) process can linger; do not hang on it.
_KILL_WAIT_S = 10.0


# -- command line ------------------------------------------------------------------------


def build_command(
    launcher: Literal["process", "torchrun"] | str,
    payload_path: str | os.PathLike[str],
    *,
    nproc_per_node: int = 1,
    python: str = sys.executable,
    rdzv_port: int | None = None,
) -> list[str]:
    """The argv of one trial.

    ``process``: ``python -m dvt_hpo.worker PAYLOAD``. ``torchrun``: the same module under
    ``python -m torch.distributed.run`` on one node, no restarts (a failed trial is data,
    not something to retry in place). Without ``rdzv_port`` the rendezvous is
    ``--standalone``: torchrun binds its store to port 0, which the kernel makes unique, so
    parallel trials never collide; with ``rdzv_port`` it is a c10d store on
    ``127.0.0.1:rdzv_port``.
    """
    payload = os.fspath(payload_path)
    if nproc_per_node < 1:
        raise ValueError(f"nproc_per_node must be >= 1, got {nproc_per_node}")
    if launcher == "process":
        if nproc_per_node != 1:
            raise ValueError(
                f"launcher 'process' runs one process per trial; nproc_per_node={nproc_per_node} "
                "needs launcher 'torchrun'"
            )
        return [python, "-m", WORKER_MODULE, payload]
    if launcher == "torchrun":
        if rdzv_port is None:
            rendezvous = ["--standalone"]
        else:
            if not 0 < rdzv_port < 65536:
                raise ValueError(f"rdzv_port must be in 1..65535, got {rdzv_port}")
            rendezvous = [
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{rdzv_port}",
                f"--rdzv-id=dvt-hpo-{rdzv_port}",
            ]
        return [
            python,
            "-m",
            "torch.distributed.run",
            *rendezvous,
            "--nnodes=1",
            f"--nproc-per-node={nproc_per_node}",
            "--max-restarts=0",
            # Older torch defaults to 5 s: a failed rank would leave the others running that long.
            "--monitor-interval=0.1",
            "-m",
            WORKER_MODULE,
            payload,
        ]
    raise ValueError(f"launcher must be 'process' or 'torchrun', got {launcher!r}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (another process may take it before use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# -- exits and logs ----------------------------------------------------------------------


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


def tail_lines(path: str | os.PathLike[str], n: int = 50) -> str:
    """The last ``n`` lines of a text file ("" when it does not exist), read from the end."""
    if n <= 0:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            block = 8192
            data = b""
            pos = end
            while pos > 0 and data.count(b"\n") <= n:
                step = min(block, pos)
                pos -= step
                f.seek(pos)
                data = f.read(step) + data
    except (FileNotFoundError, IsADirectoryError):
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    return "\n".join(lines[-n:])


# -- the process tree (Linux /proc) -------------------------------------------------------


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


def _descendant_groups(root_pid: int) -> set[int]:
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


@dataclass(frozen=True)
class StopOutcome:
    """How :meth:`TrialProcess.stop` ended a trial."""

    returncode: int
    # exited: it was already over; terminated: it ended within the grace after SIGTERM;
    # killed: it needed SIGKILL.
    how: Literal["exited", "terminated", "killed"]
    seconds: float  # from the stop() call until every process of the trial was gone
    all_gone: bool  # False only if some process survived SIGKILL (uninterruptible sleep)


class TrialProcess:
    """One trial's leader process and its process group (the leader's pid is the group id)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.pgid = popen.pid  # start_new_session: the leader leads its own group
        self.started_s = time.perf_counter()
        self.exited_s: float | None = None  # when the exit was first seen
        self.stop_requested_s: float | None = None
        self.gone_s: float | None = None  # when wait() or stop() saw every process gone
        self._lock = threading.Lock()
        self._cleaned = False
        try:
            self._pidfd: int | None = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self._pidfd = None

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | os.PathLike[str] | None,
        stdout_path: str | os.PathLike[str],
        stderr_path: str | os.PathLike[str],
    ) -> TrialProcess:
        """Start ``argv`` in a new session with its output appended to the two log files."""
        Path(stdout_path).parent.mkdir(parents=True, exist_ok=True)
        Path(stderr_path).parent.mkdir(parents=True, exist_ok=True)
        with open(stdout_path, "ab") as out, open(stderr_path, "ab") as err:
            popen = _SPAWNER.popen(
                args=list(argv),
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                close_fds=True,
                start_new_session=True,
            )
        return cls(popen)

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    def poll(self) -> int | None:
        """The exit status if the leader has exited (reaped), else None; never blocks."""
        return self.wait(0)

    def wait(self, timeout_s: float | None = None) -> int | None:
        """Wait for the leader to exit; its status, or None on timeout.

        Once the leader has exited, what is left of its group is killed *before* the leader is
        reaped (while the leader is a zombie its group id cannot be reused by another process),
        and waited for: when ``wait`` returns a status, no process of the group is alive.
        """
        if self._popen.returncode is not None:
            return self._popen.returncode
        if not self._wait_exited(timeout_s):
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
                if self.gone_s is None:
                    self.gone_s = time.perf_counter()
        return self._popen.wait()

    def stop(self, grace_s: float, *, extra_pids: Iterable[int] = ()) -> StopOutcome:
        """SIGTERM the trial, wait up to ``grace_s``, then SIGKILL; reap; wait until gone.

        The trial is the leader's group, the groups of the leader's descendants that started
        sessions of their own (torchrun ranks) and ``extra_pids`` (e.g. the pids from the
        ``hello`` messages), each with its group when it leads one.
        """
        t0 = time.perf_counter()
        self.stop_requested_s = t0
        extra_pids = tuple(extra_pids)
        groups, pids = self._targets(extra_pids)
        if self.poll() is not None:
            how: Literal["exited", "terminated", "killed"] = "exited"
            code = self._popen.returncode
            assert code is not None
        else:
            self._signal(groups, pids, signal.SIGTERM)
            code = self.wait(max(0.0, grace_s))
            how = "terminated"
            if code is None:
                how = "killed"
                more_groups, more_pids = self._targets(extra_pids)
                groups |= more_groups
                pids |= more_pids
                self._signal(groups, pids, signal.SIGKILL)
                code = self.wait(None)
                assert code is not None
        # Whatever survived its leader in other sessions dies now. The leader's own group was
        # cleaned by wait() before the reap; its id may be reused from here on: not signalled.
        groups.discard(self.pgid)
        self._signal(groups, pids, signal.SIGKILL)
        members = {pid for pgid in groups for pid in group_members(pgid)} | {
            pid for pid in pids if pid_alive(pid)
        }
        all_gone = wait_gone(members, _KILL_WAIT_S)
        self.gone_s = time.perf_counter()
        return StopOutcome(code, how, self.gone_s - t0, all_gone)

    def _targets(self, extra_pids: Iterable[int]) -> tuple[set[int], set[int]]:
        groups = {self.pgid}
        pids: set[int] = set()
        if self._popen.returncode is None:
            groups |= _descendant_groups(self.pid)
        for pid in extra_pids:
            try:
                pgid = os.getpgid(pid)
            except ProcessLookupError:
                continue
            if pgid == pid:
                groups.add(pgid)
            else:
                pids.add(pid)
        groups.discard(os.getpgrp())
        return groups, pids

    @staticmethod
    def _signal(groups: set[int], pids: set[int], sig: int) -> None:
        for pgid in groups:
            _signal_group(pgid, sig)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def _wait_exited(self, timeout_s: float | None) -> bool:
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

    def __del__(self) -> None:
        fd, self._pidfd = getattr(self, "_pidfd", None), None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


# -- devices ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """Where one trial at a time runs: its GPUs (``CUDA_VISIBLE_DEVICES``) and CPU threads."""

    index: int
    cuda_visible_devices: str | None  # "" hides every GPU; None leaves the variable alone
    omp_num_threads: int | None

    @property
    def gpus(self) -> tuple[str, ...]:
        if not self.cuda_visible_devices:
            return ()
        return tuple(self.cuda_visible_devices.split(","))


def visible_gpus(env: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` entries.

    From ``CUDA_VISIBLE_DEVICES`` when it is set (CUDA stops at the first invalid entry, e.g.
    ``-1``), else from ``nvidia-smi -L``; none where nvidia-smi is missing. Never imports torch.
    """
    env = os.environ if env is None else env
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is not None:
        entries: list[str] = []
        for entry in (e.strip() for e in value.split(",")):
            if not entry or entry.startswith("-"):
                break
            entries.append(entry)
        return entries
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    n = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    return [str(i) for i in range(n)]


def _parse_gpu_indexes(devices: Any) -> list[int] | None:
    """Explicit GPU indexes from a list or a string like "0,1", "cuda:0,1", "cuda:2"."""
    items: list[Any]
    if isinstance(devices, (list, tuple)):
        items = list(devices)
    elif isinstance(devices, str):
        text = devices.strip()
        if text.startswith("cuda:"):
            text = text[len("cuda:") :]
        items = [part.strip() for part in text.split(",")]
    else:
        return None
    indexes: list[int] = []
    for item in items:
        if isinstance(item, str) and item.startswith("cuda:"):
            item = item[len("cuda:") :]
        if isinstance(item, bool):
            return None
        if isinstance(item, int):
            indexes.append(item)
        elif isinstance(item, str) and item.isdigit():
            indexes.append(int(item))
        else:
            return None
    return indexes


def split_devices(
    devices: Any,
    parallel: int,
    *,
    nproc_per_node: int = 1,
    cpu_count: int | None = None,
    gpus: Sequence[str] | int | None = None,
) -> list[Slot]:
    """Split the devices of ``trials.devices`` into ``parallel`` slots.

    - ``auto``: every visible GPU if there is one, else the CPU.
    - ``cpu``: no GPU (``CUDA_VISIBLE_DEVICES=""``).
    - ``cuda`` / ``gpu``: every visible GPU (an error where there is none).
    - an int N: the first N visible GPUs (as in deepvisiontools an int is a count; the number of
      processes of a trial is ``trials.nproc_per_node``).
    - a list or a string ``[0, 1]``, ``"0,1"``, ``"cuda:0,1"``, ``"cuda:2"``: those GPUs, by
      index among the visible ones (the physical ids when ``CUDA_VISIBLE_DEVICES`` is unset).

    GPUs are split evenly in contiguous blocks (a remainder stays unused, so all slots are
    alike); each slot needs one GPU per process. CPU cores are split evenly among all the
    processes of all slots through ``OMP_NUM_THREADS`` (at least 1). ``gpus`` is the list of
    visible GPUs (an int N means "0".."N-1"); None detects them with :func:`visible_gpus`.
    """
    field = "trials.devices"
    if parallel < 1:
        raise SpecError(f"must be >= 1, got {parallel}", field="trials.parallel")
    if nproc_per_node < 1:
        raise SpecError(f"must be >= 1, got {nproc_per_node}", field="trials.nproc_per_node")
    cpus = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    threads = max(1, cpus // (parallel * nproc_per_node))

    def cpu_slots() -> list[Slot]:
        return [Slot(i, "", threads) for i in range(parallel)]

    def visible() -> list[str]:
        if gpus is None:
            return visible_gpus()
        if isinstance(gpus, int):
            return [str(i) for i in range(gpus)]
        return [str(g) for g in gpus]

    if devices is None or (isinstance(devices, str) and devices.strip().lower() == "auto"):
        available = visible()
        if not available:
            return cpu_slots()
        selected = available
    elif isinstance(devices, str) and devices.strip().lower() == "cpu":
        return cpu_slots()
    elif isinstance(devices, str) and devices.strip().lower() in ("cuda", "gpu"):
        selected = visible()
        if not selected:
            raise SpecError(
                f"{devices!r} asks for the GPUs but none is visible (CUDA_VISIBLE_DEVICES / "
                "nvidia-smi -L); use 'auto' or 'cpu'",
                field=field,
            )
    elif isinstance(devices, int) and not isinstance(devices, bool):
        available = visible()
        if devices < 1:
            raise SpecError(
                f"an int is a number of GPUs and must be >= 1, got {devices}; use 'cpu' for none",
                field=field,
            )
        if devices > len(available):
            raise SpecError(
                f"{devices} asks for {devices} GPUs but {len(available)} are visible "
                f"({','.join(available) or 'none'}); use 'auto' or 'cpu'",
                field=field,
            )
        selected = available[:devices]
    else:
        indexes = _parse_gpu_indexes(devices)
        if indexes is None or not indexes:
            raise SpecError(
                "must be 'auto', 'cpu', 'cuda', a number of GPUs, or GPU indexes like "
                f"[0, 1], '0,1', 'cuda:0,1', 'cuda:2'; got {devices!r}",
                field=field,
            )
        available = visible()
        if len(set(indexes)) != len(indexes):
            raise SpecError(f"lists a GPU twice: {devices!r}", field=field)
        bad = [i for i in indexes if i >= len(available)]
        if bad:
            raise SpecError(
                f"GPU index {bad[0]} is not visible: {len(available)} GPU(s) are "
                f"({','.join(available) or 'none'}); got {devices!r}",
                field=field,
            )
        selected = [available[i] for i in indexes]

    per_slot = len(selected) // parallel
    if per_slot < 1:
        raise SpecError(
            f"{devices!r} selects {len(selected)} GPU(s) ({','.join(selected)}) but "
            f"trials.parallel={parallel} needs at least one per trial slot",
            field=field,
        )
    if per_slot < nproc_per_node:
        raise SpecError(
            f"{devices!r} gives each of the {parallel} slot(s) {per_slot} GPU(s) but "
            f"trials.nproc_per_node={nproc_per_node} needs one per process "
            f"({parallel * nproc_per_node} in all)",
            field=field,
        )
    return [
        Slot(i, ",".join(selected[i * per_slot : (i + 1) * per_slot]), threads)
        for i in range(parallel)
    ]


def trial_env(
    base_env: Mapping[str, str],
    slot: Slot,
    control_path: str | os.PathLike[str],
    memory_limit_bytes: int | None,
) -> dict[str, str]:
    """The environment of a trial process: ``base_env`` plus the control socket, the memory
    limit, the slot's devices and threads (an ``OMP_NUM_THREADS`` set in ``base_env`` wins:
    the user chose it), minus any torchrun variables the orchestrator itself was started with."""
    env = {
        k: v
        for k, v in base_env.items()
        if k not in _DISTRIBUTED_ENV and not k.startswith("TORCHELASTIC_")
    }
    env[ENV_CONTROL] = os.fspath(control_path)
    if memory_limit_bytes is not None:
        if memory_limit_bytes < 1:
            raise ValueError(f"memory_limit_bytes must be >= 1, got {memory_limit_bytes}")
        env[ENV_MEMORY_LIMIT] = str(int(memory_limit_bytes))
    else:
        env.pop(ENV_MEMORY_LIMIT, None)
    if slot.cuda_visible_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = slot.cuda_visible_devices
    if slot.omp_num_threads is not None and "OMP_NUM_THREADS" not in base_env:
        env["OMP_NUM_THREADS"] = str(slot.omp_num_threads)
        env.setdefault("MKL_NUM_THREADS", str(slot.omp_num_threads))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


__all__ = [
    "Slot",
    "StopOutcome",
    "TrialProcess",
    "WORKER_MODULE",
    "build_command",
    "describe_exit",
    "free_port",
    "group_members",
    "pid_alive",
    "split_devices",
    "tail_lines",
    "trial_env",
    "visible_gpus",
    "wait_gone",
]
