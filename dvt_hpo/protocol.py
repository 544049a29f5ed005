"""The JSON-lines control channel between the orchestrator and a trial process.

Stdlib only (the orchestrator imports it; it must never pull in torch). See docs/protocol.md.

The orchestrator runs one :class:`ControlServer` per trial on an ``AF_UNIX`` socket; every rank of
the trial connects with a :class:`ControlClient`, says ``hello``, streams ``report`` messages and
waits for each ``decision``. The connection doubles as a watchdog: when the trial side reads
end-of-file (the orchestrator closed the server or died, even by ``kill -9``), it calls its
``on_lost`` callback, which in the worker kills the trial's own process group.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

PROTOCOL_VERSION = 1
ENV_CONTROL = "DVT_HPO_CONTROL"
ENV_MEMORY_LIMIT = "DVT_HPO_MEMORY_LIMIT"

# Exit codes of ``python -m dvt_hpo.worker`` (the result file says more; these let the
# orchestrator tell outcomes apart when no result file could be written).
EXIT_OK = 0
EXIT_ERROR = 1  # the entry point raised (including MemoryError); result has the reason
EXIT_BAD_PAYLOAD = 2  # the payload could not be read or is malformed; no result file
EXIT_PRUNED = 3  # ctx.report raised TrialPruned and the entry point let it through
EXIT_NO_ORCHESTRATOR = 4  # the control socket was unreachable at start: nobody to report to
EXIT_STOPPED = 128 + 15  # stopped by SIGTERM (the shell convention for a signal's death)

# A line longer than this is a bug (metrics are small); it ends the connection, not the process.
MAX_LINE_BYTES = 16 * 1024 * 1024
# AF_UNIX paths are limited to ~107 bytes on Linux (sun_path is 108 bytes with the NUL).
MAX_SOCKET_PATH_BYTES = 107

_log = logging.getLogger(__name__)


class ProtocolError(ValueError):
    """A line that is not a JSON object with a string ``type``."""


class LineTooLong(ProtocolError):
    """A peer sent more than ``MAX_LINE_BYTES`` without a newline: the stream cannot resync."""


class ControlUnavailable(ConnectionError):
    """The trial process could not reach the orchestrator's control socket."""


class ConnectionLost(ConnectionError):
    """The control connection ended while a request waited for its reply."""


# -- encoding ----------------------------------------------------------------------------


def encode(msg: Mapping[str, Any]) -> bytes:
    """One message as one JSON line (UTF-8, newline-terminated).

    NaN and infinities are written as Python's JSON extension literals (``NaN``,
    ``Infinity``): a diverged loss is data the orchestrator must see, and both ends are Python.
    """
    if not isinstance(msg.get("type"), str):
        raise ProtocolError(f"a message needs a string 'type', got {msg.get('type')!r}")
    return json.dumps(msg, separators=(",", ":"), allow_nan=True).encode("utf-8") + b"\n"


def decode(line: bytes | str) -> dict[str, Any]:
    """The message in one line (with or without its newline)."""
    try:
        msg = json.loads(line)
    except ValueError as exc:
        raise ProtocolError(f"a control line must be JSON: {exc}; line: {line[:200]!r}") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise ProtocolError(f"a control line must be a JSON object with a string 'type': {msg!r}")
    return msg


class LineReader:
    """Reads newline-terminated messages from a stream socket, across partial reads.

    ``read()`` blocks in ``recv`` (no polling) and returns the next message, or ``None`` at
    end-of-file. A connection reset also reads as end-of-file: for a watchdog both mean
    "the other side is gone".
    """

    def __init__(self, sock: socket.socket, *, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._sock = sock
        self._buffer = bytearray()
        self._max_line_bytes = max_line_bytes
        self._eof = False

    def read(self) -> dict[str, Any] | None:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                return decode(line)
            if self._eof:
                return None
            if len(self._buffer) > self._max_line_bytes:
                raise LineTooLong(
                    f"a control line exceeds {self._max_line_bytes} bytes without a newline"
                )
            try:
                chunk = self._sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            except OSError:
                # The socket was shut down or closed under us by close(): end of stream.
                chunk = b""
            if not chunk:
                # A partial last line without a newline is dropped: the writer died mid-line.
                self._eof = True
                return None
            self._buffer += chunk


# -- orchestrator side -------------------------------------------------------------------


class TrialHandler(Protocol):
    """What a :class:`ControlServer` calls for the messages of one trial.

    Calls are serialized (one at a time, under the server's lock), on the server's reader
    threads; a handler only needs to guard state it shares with other threads of its own.
    """

    def on_hello(self, rank: int, pid: int, host: str) -> None: ...

    def on_report(self, step: int, metrics: dict[str, float]) -> bool: ...  # True: prune

    def on_attrs(self, attrs: dict[str, Any]) -> None: ...

    def on_cache_get(self, key: str) -> dict[str, Any] | None: ...

    def on_cache_put(self, key: str, value: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class Hello:
    """A connected trial process, as its ``hello`` described it."""

    rank: int
    pid: int
    pgid: int
    host: str
    local_rank: int
    world_size: int
    received_s: float  # time.perf_counter() when the hello was read


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
        self._accepted = 0
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

    @property
    def n_connections(self) -> int:
        """Connections open now."""
        with self._lock:
            return len(self._connections)

    @property
    def n_accepted(self) -> int:
        """Connections accepted since the start."""
        with self._lock:
            return self._accepted

    def wait_hellos(self, n: int, timeout_s: float | None) -> bool:
        """Wait until ``n`` processes said hello; False on timeout or close."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._changed:
            while len(self._hellos) < n and not self._closed:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return len(self._hellos) >= n

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
                self._accepted += 1
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
                    msg = reader.read()
                except LineTooLong as exc:
                    _log.error("control connection %d: %s; closing it", conn_id, exc)
                    return
                except ProtocolError as exc:
                    _log.error("control connection %d: %s; line ignored", conn_id, exc)
                    continue
                if msg is None:
                    return
                received_s = time.perf_counter()
                reply = self._dispatch(msg, received_s)
                if reply is not None:
                    try:
                        conn.sendall(encode(reply))
                    except OSError:
                        return  # the trial process is gone; nothing to answer
                    if reply["type"] == "decision":
                        sent_s = time.perf_counter()
                        step = msg.get("step")
                        timing = ReportTiming(
                            step if isinstance(step, int) else -1,
                            received_s,
                            sent_s,
                            reply["prune"],
                        )
                        with self._lock:
                            self._timings.append(timing)
        finally:
            with self._lock:
                self._connections.pop(conn_id, None)
                self._changed.notify_all()
            with contextlib.suppress(OSError):
                conn.close()

    def _dispatch(self, msg: dict[str, Any], received_s: float) -> dict[str, Any] | None:
        kind = msg["type"]
        msg_id = msg.get("id")
        try:
            if kind == "hello":
                hello = Hello(
                    rank=int(msg["rank"]),
                    pid=int(msg["pid"]),
                    pgid=int(msg.get("pgid", msg["pid"])),
                    host=str(msg.get("host", "")),
                    local_rank=int(msg.get("local_rank", 0)),
                    world_size=int(msg.get("world_size", 1)),
                    received_s=received_s,
                )
                with self._lock:
                    self._hellos.append(hello)
                    self._changed.notify_all()
                with self._handler_lock:
                    self._handler.on_hello(hello.rank, hello.pid, hello.host)
                return None
            if kind == "report":
                step = int(msg["step"])
                metrics = msg["metrics"]
                if not isinstance(metrics, dict):
                    raise ProtocolError(f"report metrics must be an object, got {metrics!r}")
                with self._handler_lock:
                    prune = bool(self._handler.on_report(step, metrics))
                return {"type": "decision", "id": msg_id, "prune": prune}
            if kind == "attrs":
                attrs = msg["attrs"]
                if not isinstance(attrs, dict):
                    raise ProtocolError(f"attrs must be an object, got {attrs!r}")
                with self._handler_lock:
                    self._handler.on_attrs(attrs)
                return None
            if kind == "cache_get":
                key = str(msg["key"])
                # Under the handler lock, so two ranks asking at once get one handler call.
                with self._handler_lock:
                    with self._lock:
                        known = key in self._cache_snapshot
                        value = self._cache_snapshot.get(key)
                    if not known:
                        value = self._handler.on_cache_get(key)
                        if value is not None and not isinstance(value, dict):
                            raise ProtocolError(f"a cache value must be an object, got {value!r}")
                        with self._lock:
                            self._cache_snapshot[key] = value
                return {"type": "cache", "id": msg_id, "value": value}
            if kind == "cache_put":
                key = str(msg["key"])
                value = msg["value"]
                if not isinstance(value, dict):
                    raise ProtocolError(f"a cache value must be an object, got {value!r}")
                with self._handler_lock:
                    self._handler.on_cache_put(key, value)
                    with self._lock:
                        self._cache_snapshot[key] = value
                return None
            _log.warning("control: unknown message type %r ignored", kind)
            if msg_id is not None:
                return {"type": "error", "id": msg_id, "message": f"unknown type {kind!r}"}
            return None
        except Exception:
            _log.exception("control: handling a %r message failed; answering safely", kind)
            if kind == "report":
                return {"type": "decision", "id": msg_id, "prune": False}
            if kind == "cache_get":
                return {"type": "cache", "id": msg_id, "value": None}
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


# -- trial side --------------------------------------------------------------------------


class _Pending:
    __slots__ = ("event", "reply")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reply: dict[str, Any] | None = None


class ControlClient:
    """The trial process's end of the control channel.

    One background reader thread matches replies to requests by ``id`` and watches the
    connection: on end-of-file or reset (not caused by :meth:`close`) it calls ``on_lost``
    once. Sends are thread-safe.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self._on_lost = on_lost
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.connect(self.path)
        except OSError as exc:
            self._sock.close()
            raise ControlUnavailable(
                f"cannot reach the orchestrator's control socket {self.path!r} "
                f"(${ENV_CONTROL}): {exc.strerror or exc}; the orchestrator is gone"
            ) from None
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._closing = False
        self.lost = threading.Event()
        self._reader = threading.Thread(target=self._read_loop, name="dvt-watchdog", daemon=True)
        self._reader.start()

    @classmethod
    def connect(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        rank: int = 0,
        local_rank: int = 0,
        world_size: int = 1,
        on_lost: Callable[[], None] | None = None,
    ) -> ControlClient:
        """Connect (to ``$DVT_HPO_CONTROL`` by default) and say hello."""
        if path is None:
            path = os.environ.get(ENV_CONTROL)
            if not path:
                raise ControlUnavailable(f"${ENV_CONTROL} is not set: no orchestrator to report to")
        client = cls(path, on_lost=on_lost)
        client.send(
            {
                "type": "hello",
                "protocol": PROTOCOL_VERSION,
                "rank": rank,
                "local_rank": local_rank,
                "world_size": world_size,
                "pid": os.getpid(),
                "pgid": os.getpgrp(),
                "host": socket.gethostname(),
            }
        )
        return client

    def send(self, msg: Mapping[str, Any]) -> None:
        """Fire-and-forget; raises :class:`ConnectionLost` when the connection is gone."""
        data = encode(msg)
        with self._send_lock:
            try:
                self._sock.sendall(data)
            except OSError as exc:
                raise ConnectionLost(f"control connection lost: {exc}") from None

    def request(self, msg: Mapping[str, Any], timeout_s: float | None) -> dict[str, Any] | None:
        """Send ``msg`` with a fresh ``id`` and wait for its reply; ``None`` on timeout (a
        late reply is then dropped). Raises :class:`ConnectionLost` if the connection ends."""
        pending = _Pending()
        with self._lock:
            if self.lost.is_set():
                raise ConnectionLost("control connection lost before the request")
            msg_id = next(self._ids)
            self._pending[msg_id] = pending
        try:
            self.send({**msg, "id": msg_id})
            if not pending.event.wait(timeout_s):
                return None
        finally:
            with self._lock:
                self._pending.pop(msg_id, None)
        if pending.reply is None:
            raise ConnectionLost(f"control connection lost while waiting for {msg['type']!r}")
        return pending.reply

    def close(self) -> None:
        """Close the connection without triggering ``on_lost``."""
        with self._lock:
            self._closing = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()
        if self._reader is not threading.current_thread():
            self._reader.join(timeout=5.0)

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _read_loop(self) -> None:
        reader = LineReader(self._sock)
        try:
            while True:
                try:
                    msg = reader.read()
                except LineTooLong as exc:
                    _log.error("control: %s; closing the connection", exc)
                    return
                except ProtocolError as exc:
                    _log.error("control: %s; line ignored", exc)
                    continue
                if msg is None:
                    return
                msg_id = msg.get("id")
                with self._lock:
                    pending = self._pending.get(msg_id) if isinstance(msg_id, int) else None
                if pending is not None:
                    pending.reply = msg
                    pending.event.set()
        finally:
            with self._lock:
                self.lost.set()
                closing = self._closing
                waiting = list(self._pending.values())
            for pending in waiting:
                pending.event.set()  # reply stays None: the waiter raises ConnectionLost
            if not closing and self._on_lost is not None:
                self._on_lost()


__all__ = [
    "ENV_CONTROL",
    "ENV_MEMORY_LIMIT",
    "EXIT_BAD_PAYLOAD",
    "EXIT_ERROR",
    "EXIT_NO_ORCHESTRATOR",
    "EXIT_OK",
    "EXIT_PRUNED",
    "EXIT_STOPPED",
    "PROTOCOL_VERSION",
    "ConnectionLost",
    "ControlClient",
    "ControlServer",
    "ControlUnavailable",
    "Hello",
    "LineReader",
    "LineTooLong",
    "ProtocolError",
    "ReportTiming",
    "TrialHandler",
    "decode",
    "encode",
    "short_socket_dir",
]
