"""The orchestrator's end of a trial's control channel: an AF_UNIX server per trial.

Stdlib only (the orchestrator must never import torch). See docs/protocol.md.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import stat
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from dvt_hpo.wire.protocol import (
    MAX_SOCKET_PATH_BYTES,
    Attrs,
    CacheGet,
    CachePut,
    CacheReply,
    Decision,
    ErrorReply,
    Hello,
    LineReader,
    LineTooLong,
    Message,
    ProtocolError,
    Report,
    encode,
    from_wire,
    to_wire,
    version_mismatch,
)

_log = logging.getLogger(__name__)


class TrialHandler(Protocol):
    """What a :class:`ControlServer` calls for the messages of one trial.

    Calls are serialized (one at a time, under the server's lock), on the server's reader
    threads; a handler only needs to guard state it shares with other threads of its own.
    """

    def on_hello(self, hello: Hello) -> None: ...

    def on_protocol_error(self, message: str) -> None: ...  # a refused hello

    def on_report(self, step: int, metrics: dict[str, float]) -> bool: ...  # True: prune

    def on_reported(self, step: int, metrics: dict[str, float], prune: bool) -> None: ...

    def on_attrs(self, attrs: dict[str, Any]) -> None: ...

    def on_cache_get(self, key: str) -> dict[str, Any] | None: ...

    def on_cache_put(self, key: str, value: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class ReportTiming:
    """When a report was read and when its decision was written (``time.perf_counter()``)."""

    step: int
    received_s: float
    sent_s: float
    prune: bool

    @property
    def latency_s(self) -> float:
        return self.sent_s - self.received_s


def short_socket_dir() -> str:
    """A fresh private folder (mode 0700) for a control socket, on a path short enough for
    ``AF_UNIX``; the caller removes it (``ControlServer(None, ...)`` does this itself)."""
    base = tempfile.gettempdir()
    if len(os.path.join(base, "dvt-xxxxxxxx", "c.sock").encode()) > MAX_SOCKET_PATH_BYTES:
        base = "/tmp"
    return tempfile.mkdtemp(prefix="dvt-", dir=base)


class ControlServer:
    """Accepts the control connections of one trial and answers them through a handler.

    ``path=None`` creates the socket in a fresh short temporary folder, removed on close.
    Every accepted connection gets its own reader thread (blocking reads); a handler exception
    is logged and answered with a safe reply (``prune=False``, ``value=None``), so one bad
    message never silences the trial. ``close()`` closes the listener and every connection,
    which makes the trial processes' watchdogs kill them: that is how a stop reaches ranks
    that ignore signals or were started by torchrun in their own sessions.

    Cache replies are snapshotted per key for the life of the server: every rank of the trial
    sees the same entry, even when another trial writes that key in between.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        handler: TrialHandler,
        *,
        backlog: int = 64,
    ) -> None:
        self._own_dir: str | None = None
        if path is None:
            self._own_dir = short_socket_dir()
            path = os.path.join(self._own_dir, "c.sock")
        self.path = os.fspath(path)
        if len(self.path.encode()) > MAX_SOCKET_PATH_BYTES:
            raise ValueError(
                f"an AF_UNIX socket path must be at most {MAX_SOCKET_PATH_BYTES} bytes, got "
                f"{len(self.path.encode())}: {self.path!r}; create it with short_socket_dir()"
            )
        self._handler = handler
        self._lock = threading.Lock()  # guards the fields below
        self._handler_lock = threading.Lock()  # serializes handler calls
        self._changed = threading.Condition(self._lock)
        self._connections: dict[int, socket.socket] = {}
        self._threads: list[threading.Thread] = []
        self._hellos: list[Hello] = []
        self._timings: list[ReportTiming] = []
        self._cache_snapshot: dict[str, dict[str, Any] | None] = {}
        self._closed = False
        self._counter = itertools.count()

        _remove_stale_socket(self.path)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._listener.bind(self.path)
            self._listener.listen(backlog)
        except BaseException:
            self._listener.close()
            self._remove_files()
            raise
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name="dvt-control-accept", daemon=True
        )
        self._accept_thread.start()

    # -- public ----------------------------------------------------------------------------
    @property
    def hellos(self) -> list[Hello]:
        """The processes that said hello, in arrival order."""
        with self._lock:
            return list(self._hellos)

    @property
    def report_timings(self) -> list[ReportTiming]:
        with self._lock:
            return list(self._timings)

    def drain(self, timeout_s: float | None) -> bool:
        """Wait until every accepted connection has been closed by its trial process and its
        last message handled (call it after the process exited, before reading results).
        False on timeout (e.g. an orphaned rank still holds its connection)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._changed:
            while self._connections and not self._closed:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return not self._connections

    def close(self) -> None:
        """Close the listener and all connections, remove the socket file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            connections = list(self._connections.values())
            threads = list(self._threads)
            self._changed.notify_all()
        # shutdown() wakes the threads blocked in accept()/recv(); close() alone may not.
        for sock in (self._listener, *connections):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for sock in connections:
            with contextlib.suppress(OSError):
                sock.close()
        # From a handler (a server thread) joining could wait on the handler lock it holds.
        if threading.current_thread() not in (self._accept_thread, *threads):
            for thread in (self._accept_thread, *threads):
                thread.join(timeout=5.0)
        self._remove_files()

    def __enter__(self) -> ControlServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- threads -------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                conn_id = next(self._counter)
                self._connections[conn_id] = conn
                thread = threading.Thread(
                    target=self._serve,
                    args=(conn_id, conn),
                    name=f"dvt-control-conn-{conn_id}",
                    daemon=True,
                )
                self._threads.append(thread)
            thread.start()

    def _serve(self, conn_id: int, conn: socket.socket) -> None:
        reader = LineReader(conn)
        try:
            while True:
                try:
                    raw = reader.read()
                except LineTooLong as exc:
                    _log.error("control connection %d: %s; closing it", conn_id, exc)
                    return
                except ProtocolError as exc:
                    _log.error("control connection %d: %s; line ignored", conn_id, exc)
                    continue
                if raw is None:
                    return
                received_s = time.perf_counter()
                try:
                    msg = from_wire(raw)
                except ProtocolError as exc:
                    _log.error("control connection %d: %s; message ignored", conn_id, exc)
                    if isinstance(raw.get("id"), int):
                        self._send(conn, ErrorReply(raw["id"], str(exc)))
                    continue
                if isinstance(msg, Hello):
                    refused = version_mismatch(msg)
                    if refused is not None:
                        # The trial cannot be understood: tell it, record why, hang up (its
                        # watchdog then ends its process group).
                        with self._handler_lock:
                            self._handler.on_protocol_error(refused)
                        self._send(conn, ErrorReply(None, refused))
                        return
                reply = self._dispatch(msg)
                if reply is None:
                    continue
                if not self._send(conn, reply):
                    return  # the trial process is gone; nothing to answer
                if isinstance(reply, Decision) and isinstance(msg, Report):
                    sent_s = time.perf_counter()
                    with self._lock:
                        self._timings.append(
                            ReportTiming(msg.step, received_s, sent_s, reply.prune)
                        )
                    # After the answer, never before: observers must not delay a decision.
                    with self._handler_lock, _logged("on_reported"):
                        self._handler.on_reported(msg.step, msg.metrics, reply.prune)
        finally:
            with self._lock:
                self._connections.pop(conn_id, None)
                self._changed.notify_all()
            with contextlib.suppress(OSError):
                conn.close()

    @staticmethod
    def _send(conn: socket.socket, msg: Message) -> bool:
        try:
            conn.sendall(encode(to_wire(msg)))
        except OSError:
            return False
        return True

    def _dispatch(self, msg: Message) -> Message | None:
        try:
            if isinstance(msg, Hello):
                with self._lock:
                    self._hellos.append(msg)
                    self._changed.notify_all()
                with self._handler_lock:
                    self._handler.on_hello(msg)
                return None
            if isinstance(msg, Report):
                with self._handler_lock:
                    prune = bool(self._handler.on_report(msg.step, dict(msg.metrics)))
                return Decision(msg.id, prune)
            if isinstance(msg, Attrs):
                with self._handler_lock:
                    self._handler.on_attrs(dict(msg.attrs))
                return None
            if isinstance(msg, CacheGet):
                # Under the handler lock, so two ranks asking at once get one handler call.
                with self._handler_lock:
                    with self._lock:
                        known = msg.key in self._cache_snapshot
                        value = self._cache_snapshot.get(msg.key)
                    if not known:
                        value = self._handler.on_cache_get(msg.key)
                        if value is not None and not isinstance(value, dict):
                            raise ProtocolError(f"a cache value must be an object, got {value!r}")
                        with self._lock:
                            self._cache_snapshot[msg.key] = value
                return CacheReply(msg.id, value)
            if isinstance(msg, CachePut):
                with self._handler_lock:
                    self._handler.on_cache_put(msg.key, dict(msg.value))
                    with self._lock:
                        self._cache_snapshot[msg.key] = dict(msg.value)
                return None
            _log.warning("control: unexpected %r message ignored", msg.TYPE)
            return None
        except Exception:
            _log.exception("control: handling a %r message failed; answering safely", msg.TYPE)
            if isinstance(msg, Report):
                return Decision(msg.id, False)
            if isinstance(msg, CacheGet):
                return CacheReply(msg.id, None)
            return None

    def _remove_files(self) -> None:
        _remove_stale_socket(self.path)
        if self._own_dir is not None:
            with contextlib.suppress(OSError):
                os.rmdir(self._own_dir)


def _remove_stale_socket(path: str) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISSOCK(mode):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


@contextlib.contextmanager
def _logged(what: str) -> Any:
    try:
        yield
    except Exception:
        _log.exception("control: %s failed", what)


__all__ = ["ControlServer", "ReportTiming", "TrialHandler", "short_socket_dir"]
