"""Warm trial starts: a template process imports once, then forks a fresh child per trial.

In the spirit of multiprocessing's forkserver (a "zygote"). The orchestrator starts one
template per study run (``python -m dvt_hpo.process.warm FD LOG_PATH MODULE...``); the template imports the trial process, the
entry point's module, torch and ``trials.preload``, then waits for requests on a socket. For
each trial it forks a child that becomes a session (and process-group) leader of its own, sets
the trial's environment, working directory and log files, and runs the trial process's ``main``
exactly as ``python -m dvt_hpo.trial PAYLOAD`` would. The child is watched like a spawned
trial: control socket, parent-death signal, timeout, SIGTERM -> grace -> SIGKILL, exit status.

Warm-up hooks: a module the template imports may define ``__dvt_hpo_warm__(folder)``. The
template calls it after the imports with a folder of that module's own under the study's runs
folder (``$DVT_HPO_WARM_DIR/<module>``, given by the launcher; without it no hook runs). A
backend whose entry module stays light (so that ``validate`` stays light) uses it to import
its heavy libraries once, with whatever they write at import time (settings files, caches)
pointed into that folder; each forked trial then points its environment at its own folder as
a cold trial does. A hook that raises turns warm starts off, as a failed import does.

Why the template is safe to fork: it never touches CUDA (``CUDA_VISIBLE_DEVICES`` is read by the
driver at its first call, in the child), runs no torch operation (so torch's intra-op thread
pool does not exist yet; the child sizes it with ``torch.set_num_threads``) and starts no
Python thread (checked after the imports: a template whose imports started threads reports
itself unsafe and trials are spawned cold).

Exit statuses: the template is the children's parent, so it learns each exit with
``waitid(WNOWAIT)`` and reports it, but reaps a child only when the orchestrator asks. Until
then the child's pid (= its process-group id) cannot be reused, so the orchestrator can still
kill what is left of the group safely, as it does for a spawned trial.

Messages are JSON lines on a socketpair (never pickle). This module is stdlib only on the
orchestrator side; torch is touched only inside the template and its children.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import signal
import socket
import sys
import sysconfig
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dvt_hpo.trial.lifeline import set_parent_death_signal

WARM_MODULE = "dvt_hpo.process.warm"
WARM_HOOK = "__dvt_hpo_warm__"
# The template's own variable (a trial's environment is replaced by the trial's): the folder
# under which each module's warm-up hook gets a folder of its own.
ENV_WARM_DIR = "DVT_HPO_WARM_DIR"
_READY_TIMEOUT_S = 300.0  # importing torch and a large trainer can take a minute on a busy node


def _send(sock: socket.socket, msg: Mapping[str, Any]) -> None:
    sock.sendall(json.dumps(msg, separators=(",", ":")).encode() + b"\n")


def _library_roots() -> tuple[str, ...]:
    """Folders whose files never change between trials (the interpreter and installed
    packages): their modules are not watched for edits."""
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= {sys.prefix, sys.base_prefix, sys.exec_prefix}
    return tuple(sorted(os.path.realpath(r) + os.sep for r in roots if r))


# A file's mtime comes from the kernel's coarse clock, which can lag time.time() by a tick.
_MTIME_SLACK_S = 0.05
# The mtime recorded for a file written while the template was importing: never a real mtime,
# so the template reads as stale at once and is started again before it serves a trial.
EDITED_DURING_IMPORT = -1.0


def watched_files(
    roots: Sequence[str] | None = None, *, imports_began: float | None = None
) -> dict[str, float]:
    """``{file: mtime}`` of every imported module outside the interpreter and installed
    packages: the user's trainer, editable installs, the study folder's modules. A file
    written after ``imports_began`` (a ``time.time()``) may have been imported before that
    write: its mtime is recorded as :data:`EDITED_DURING_IMPORT`, so it reads as changed."""
    roots = tuple(roots) if roots is not None else _library_roots()
    now = time.time()
    files: dict[str, float] = {}
    for module in list(sys.modules.values()):
        name = getattr(module, "__file__", None)
        if not name:
            continue
        path = os.path.realpath(name)
        if path.startswith(roots):
            continue
        with contextlib.suppress(OSError):
            mtime = os.stat(path).st_mtime_ns / 1e9
            # A future mtime (a skewed network file system) is not taken for an edit.
            edited = imports_began is not None and imports_began - _MTIME_SLACK_S <= mtime <= now
            files[path] = EDITED_DURING_IMPORT if edited else mtime
    return files


def changed_files(files: Mapping[str, float]) -> list[str]:
    """The files of :func:`watched_files` that changed (or vanished) since."""
    changed = []
    for path, mtime in files.items():
        try:
            if os.stat(path).st_mtime_ns / 1e9 != mtime:
                changed.append(path)
        except OSError:
            changed.append(path)
    return changed


# -- the template process ---------------------------------------------------------------------


def _preload(modules: Sequence[str]) -> dict[str, str]:
    errors: dict[str, str] = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001 - reported; the trial fails cold with it
            errors[name] = f"{type(exc).__name__}: {exc}"
    return errors


def _warm_up(modules: Sequence[str], root: str | None) -> dict[str, str]:
    """Call the warm-up hook of each imported module, each with its own folder under ``root``."""
    errors: dict[str, str] = {}
    if not root:
        return errors
    for name in modules:
        hook = getattr(sys.modules.get(name), WARM_HOOK, None)
        if not callable(hook):
            continue
        try:
            hook(Path(root) / name)
        except BaseException as exc:  # noqa: BLE001 - reported; the trial fails cold with it
            errors[name] = f"{WARM_HOOK}: {type(exc).__name__}: {exc}"
    return errors


def _child(
    request: Mapping[str, Any],
    sock: socket.socket,
    out_fd: int,
    err_fd: int,
    inherited: Sequence[int],
    template_pid: int,
) -> None:
    """In the forked child: become the trial process, run the trial process, never return."""
    # Die with the template from the first instruction: the trial process sets this again, but it
    # takes the parent it sees then as the one to die with, and a template killed in between
    # (its owner was) would leave this child running under init.
    set_parent_death_signal()
    if os.getppid() != template_pid:
        os._exit(1)
    code = 1
    try:
        os.setsid()
        sock.close()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in inherited:
            with contextlib.suppress(OSError):
                os.close(fd)
        os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        for fd, target in ((null, 0), (out_fd, 1), (err_fd, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        threads = os.environ.get("OMP_NUM_THREADS")
        torch = sys.modules.get("torch")
        if torch is not None and threads and threads.isdigit():
            # libgomp read OMP_NUM_THREADS when the template imported torch; the child's own
            # value only takes effect through the API (the pool does not exist yet).
            torch.set_num_threads(int(threads))
        args = list(request["args"])
        sys.argv = [request.get("argv0", "dvt_hpo.trial.main"), *args]
        from dvt_hpo.trial import main as trial_main

        code = trial_main.main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the child must never return into the template
        with contextlib.suppress(Exception):
            traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code if isinstance(code, int) and 0 <= code < 256 else 1)


def _status(pid: int) -> int | None:
    """The exit status of child ``pid`` as Popen reports it (negative: killed by a signal),
    without reaping it; None while it runs."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return None
    if info is None or info.si_pid == 0:
        return None
    if info.si_code == os.CLD_EXITED:
        return info.si_status
    return -info.si_status


def serve(fd: int, modules: Sequence[str]) -> int:
    """The template's main loop."""
    sock = socket.socket(fileno=fd)
    set_parent_death_signal()
    started = time.perf_counter()
    imports_began = time.time()
    errors = _preload(modules)
    errors.update(_warm_up([m for m in modules if m not in errors], os.environ.get(ENV_WARM_DIR)))
    # After the hooks: a library they imported may have started a thread.
    threads = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    _send(
        sock,
        {
            "op": "ready",
            "pid": os.getpid(),
            "errors": errors,
            "threads": threads,
            "files": watched_files(imports_began=imports_began),
            "import_s": round(time.perf_counter() - started, 3),
            "modules": sorted(m for m in modules if m in sys.modules),
        },
    )
    if threads:
        return 0  # unsafe to fork: the orchestrator spawns cold
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, bool] = {}  # pid -> exit reported
    buffer = b""
    fds: list[int] = []  # received with spawn requests (SCM_RIGHTS), two per request
    try:
        while True:
            ready, _, _ = select.select([sock, wake_r], [], [])
            if wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
            for pid, reported in list(children.items()):
                if reported:
                    continue
                status = _status(pid)
                if status is not None:
                    children[pid] = True
                    _send(sock, {"op": "exited", "pid": pid, "status": status})
            if sock not in ready:
                continue
            data, received, _, _ = socket.recv_fds(sock, 1 << 16, 16)
            fds.extend(received)
            if not data:
                return 0  # the orchestrator closed us (or died): children are killed below
            buffer += data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = json.loads(line)
                if request["op"] == "spawn":
                    for stream in (sys.stdout, sys.stderr):
                        stream.flush()
                    out_fd, err_fd = fds.pop(0), fds.pop(0)
                    template_pid = os.getpid()
                    pid = os.fork()
                    if pid == 0:
                        _child(request, sock, out_fd, err_fd, (wake_r, wake_w, *fds), template_pid)
                    os.close(out_fd)
                    os.close(err_fd)
                    children[pid] = False
                    _send(sock, {"op": "spawned", "id": request["id"], "pid": pid})
                elif request["op"] == "reap":
                    pid = int(request["pid"])
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(pid, 0)
                    children.pop(pid, None)
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


# -- the orchestrator's side ------------------------------------------------------------------


class TemplateUnavailable(RuntimeError):
    """The template could not start, died, or is unsafe: spawn the trial cold instead."""


@dataclass
class _ChildState:
    exited: threading.Event
    status: int | None = None


class WarmTemplate:
    """The orchestrator's handle on one template process."""

    def __init__(self, process: Any, sock: socket.socket, ready: Mapping[str, Any]) -> None:
        self.process = process
        self.pid: int = process.pid
        self._sock = sock
        self.errors: dict[str, str] = dict(ready.get("errors") or {})
        self.files: dict[str, float] = dict(ready.get("files") or {})
        self.import_s: float = float(ready.get("import_s") or 0.0)
        self.modules: list[str] = list(ready.get("modules") or [])
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._ids = iter(range(1, 1 << 62))
        self._spawned: dict[int, tuple[threading.Event, list[int]]] = {}
        self._children: dict[int, _ChildState] = {}
        self._dead = threading.Event()
        self._reader = threading.Thread(target=self._read_loop, name="dvt-hpo-warm", daemon=True)
        self._reader.start()

    @classmethod
    def start(
        cls,
        modules: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | os.PathLike[str],
        log_path: str | os.PathLike[str],
        popen: Any,
        python: str = sys.executable,
        ready_timeout_s: float = _READY_TIMEOUT_S,
        warm_dir: str | os.PathLike[str] | None = None,
    ) -> WarmTemplate:
        """Start a template that imports ``modules``; ``popen`` starts a process
        (``subprocess.Popen``-like; the launcher passes its long-lived spawner so the
        template's parent-death signal means "the orchestrator died"). With ``warm_dir``
        the modules' warm-up hooks run, each in a folder of its own under it."""
        import subprocess

        env = dict(env)
        if warm_dir is not None:
            env[ENV_WARM_DIR] = os.fspath(warm_dir)

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(log_path, "ab") as log:
                process = popen(
                    # The log path names the study's runs folder in `ps` (and for tests
                    # that look for a study's processes); the children show the same.
                    args=[
                        python,
                        "-m",
                        WARM_MODULE,
                        str(theirs.fileno()),
                        os.fspath(log_path),
                        *modules,
                    ],
                    env=env,
                    cwd=os.fspath(cwd),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    pass_fds=(theirs.fileno(),),
                    start_new_session=True,
                )
        except OSError as exc:
            ours.close()
            raise TemplateUnavailable(f"cannot start the warm template: {exc}") from None
        finally:
            theirs.close()
        ours.settimeout(ready_timeout_s)
        try:
            ready = _read_message(ours)
        except (OSError, ValueError) as exc:
            ready = None
            reason = str(exc) or type(exc).__name__
        else:
            reason = "it exited during its imports"
        if ready is None or ready.get("op") != "ready":
            with contextlib.suppress(OSError):
                process.kill()
            process.wait()
            ours.close()
            raise TemplateUnavailable(f"the warm template did not start ({reason}); see {log_path}")
        ours.settimeout(None)
        template = cls(process, ours, ready)
        threads = ready.get("threads") or []
        if threads:
            template.close()
            raise TemplateUnavailable(
                f"imports in the warm template started threads ({', '.join(threads)}); a fork "
                "would copy them half-alive"
            )
        return template

    @property
    def alive(self) -> bool:
        return not self._dead.is_set() and self.process.poll() is None

    def stale_reason(self) -> str | None:
        """Why the template must not serve the next trial, or None."""
        if not self.alive:
            return "the warm template died"
        changed = changed_files(self.files)
        if not changed:
            return None
        if self.files.get(changed[0]) == EDITED_DURING_IMPORT:
            return f"{changed[0]} changed on disk while the warm template imported it"
        return f"{changed[0]} changed on disk since the warm template imported it"

    def spawn(
        self,
        args: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str | os.PathLike[str],
        stdout_fd: int,
        stderr_fd: int,
        timeout_s: float = 30.0,
    ) -> WarmChild:
        """Fork a child that runs ``python -m dvt_hpo.trial *args`` in a session of its own,
        its stdout and stderr on the given file descriptors (sent to the template; the
        caller still closes its own copies)."""
        if not self.alive:
            raise TemplateUnavailable("the warm template died")
        request_id = next(self._ids)
        event = threading.Event()
        box: list[int] = []
        with self._lock:
            self._spawned[request_id] = (event, box)
        self._write(
            {
                "op": "spawn",
                "id": request_id,
                "args": list(args),
                "env": dict(env),
                "cwd": os.fspath(cwd),
            },
            fds=(stdout_fd, stderr_fd),
        )
        if not event.wait(timeout_s) or not box:
            raise TemplateUnavailable("the warm template did not fork the trial")
        return WarmChild(self, box[0])

    def close(self) -> None:
        """Stop the template: it kills whatever children are left, then exits."""
        self._dead.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()
        try:
            self.process.wait(timeout=10)
        except Exception:  # noqa: BLE001 - a stuck template is killed
            with contextlib.suppress(OSError):
                self.process.kill()
            self.process.wait()

    # -- internals ------------------------------------------------------------------------
    def _write(self, msg: Mapping[str, Any], fds: Sequence[int] = ()) -> None:
        try:
            with self._send_lock:
                if fds:
                    line = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
                    sent = socket.send_fds(self._sock, [line], list(fds))
                    if sent < len(line):
                        self._sock.sendall(line[sent:])
                else:
                    _send(self._sock, msg)
        except OSError:
            self._on_dead()
            raise TemplateUnavailable("the warm template died") from None

    def _child_state(self, pid: int) -> _ChildState:
        with self._lock:
            state = self._children.get(pid)
            if state is None:
                state = self._children[pid] = _ChildState(threading.Event())
            return state

    def _read_loop(self) -> None:
        reader = self._sock.makefile("rb")
        try:
            for line in reader:
                msg = json.loads(line)
                if msg.get("op") == "spawned":
                    with self._lock:
                        event, box = self._spawned.pop(msg["id"], (None, None))
                    self._child_state(int(msg["pid"]))
                    if event is not None and box is not None:
                        box.append(int(msg["pid"]))
                        event.set()
                elif msg.get("op") == "exited":
                    state = self._child_state(int(msg["pid"]))
                    state.status = int(msg["status"])
                    state.exited.set()
        except (OSError, ValueError):
            pass
        self._on_dead()

    def _on_dead(self) -> None:
        self._dead.set()
        with self._lock:
            for event, _ in self._spawned.values():
                event.set()
            self._spawned.clear()
            states = list(self._children.values())
        for state in states:
            if not state.exited.is_set():
                # The children died with their parent (their parent-death signal is SIGKILL).
                state.status = -int(signal.SIGKILL)
                state.exited.set()


def _read_message(sock: socket.socket) -> dict[str, Any] | None:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(1 << 16)
        if not chunk:
            return None
        data += chunk
    return json.loads(data.split(b"\n", 1)[0])


class WarmChild:
    """A trial process forked by the template: the interface the launcher needs of a leader
    process (``pid``, exit detection without reaping, reaping, ``returncode``)."""

    def __init__(self, template: WarmTemplate, pid: int) -> None:
        self.template = template
        self.pid = pid
        self._state = template._child_state(pid)
        self.returncode: int | None = None

    def exited(self, timeout_s: float | None) -> bool:
        """Whether the child has exited (it stays unreaped: its group id is not reused)."""
        return self._state.exited.wait(timeout_s)

    def reap(self) -> int:
        """Let the template reap the exited child; its status (negative: a signal)."""
        self._state.exited.wait()
        if self.returncode is None:
            with contextlib.suppress(TemplateUnavailable):
                self.template._write({"op": "reap", "pid": self.pid})
            self.returncode = self._state.status if self._state.status is not None else 1
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or not args[0].isdigit():
        sys.stderr.write("usage: python -m dvt_hpo.process.warm FD LOG_PATH [MODULE ...]\n")
        return 2
    code = serve(int(args[0]), args[2:])
    # Skip the interpreter's teardown: with torch and a trainer library imported it takes
    # seconds (measured: 2.8 s with deepvisiontools), the orchestrator waits for this exit,
    # and there is nothing left to clean up (the children were killed, no file is open).
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
