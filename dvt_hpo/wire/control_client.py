"""The trial process's end of the control channel (see docs/protocol.md).

Stdlib only. The connection doubles as a watchdog: when the trial side reads end-of-file (the
orchestrator closed the server or died, even by ``kill -9``), it calls its ``on_lost``
callback, which in the trial process kills the trial's own process group.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from dvt_hpo.wire.protocol import (
    ENV_CONTROL,
    Attrs,
    CacheGet,
    CachePut,
    ConnectionLost,
    ControlUnavailable,
    ErrorReply,
    LineReader,
    LineTooLong,
    Message,
    ProtocolError,
    Report,
    encode,
    from_wire,
    hello,
    to_wire,
)

_log = logging.getLogger(__name__)


class _Pending:
    __slots__ = ("event", "reply")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reply: Message | None = None


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
        client.send(hello(rank, local_rank, world_size, os.getpid(), os.getpgrp()))
        return client

    def send(self, msg: Message) -> None:
        """Fire-and-forget; raises :class:`ConnectionLost` when the connection is gone."""
        data = encode(to_wire(msg))
        with self._send_lock:
            try:
                self._sock.sendall(data)
            except OSError as exc:
                raise ConnectionLost(f"control connection lost: {exc}") from None

    def request(self, msg: Report | CacheGet, timeout_s: float | None) -> Message | None:
        """Send ``msg`` with a fresh ``id`` and wait for its reply; ``None`` on timeout (a
        late reply is then dropped). Raises :class:`ConnectionLost` if the connection ends."""
        pending = _Pending()
        with self._lock:
            if self.lost.is_set():
                raise ConnectionLost("control connection lost before the request")
            msg_id = next(self._ids)
            self._pending[msg_id] = pending
        try:
            self.send(dataclasses.replace(msg, id=msg_id))
            if not pending.event.wait(timeout_s):
                return None
        finally:
            with self._lock:
                self._pending.pop(msg_id, None)
        if pending.reply is None:
            raise ConnectionLost(f"control connection lost while waiting for {msg.TYPE!r}")
        return pending.reply

    def report(self, step: int, metrics: dict[str, float], timeout_s: float | None) -> bool | None:
        """The pruning decision for ``step``; None when none came within ``timeout_s``."""
        reply = self.request(Report(step, metrics), timeout_s)
        if reply is None:
            return None
        return bool(getattr(reply, "prune", False))

    def cache_get(self, key: str, timeout_s: float | None) -> dict[str, Any] | None:
        reply = self.request(CacheGet(key), timeout_s)
        value = getattr(reply, "value", None)
        return value if isinstance(value, dict) else None

    def cache_put(self, key: str, value: dict[str, Any]) -> None:
        self.send(CachePut(key, value))

    def set_attrs(self, attrs: dict[str, Any]) -> None:
        self.send(Attrs(attrs))

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
                    raw = reader.read()
                except LineTooLong as exc:
                    _log.error("control: %s; closing the connection", exc)
                    return
                except ProtocolError as exc:
                    _log.error("control: %s; line ignored", exc)
                    continue
                if raw is None:
                    return
                try:
                    msg = from_wire(raw)
                except ProtocolError as exc:
                    _log.error("control: %s; message ignored", exc)
                    continue
                if isinstance(msg, ErrorReply) and msg.id is None:
                    # The orchestrator refused this process (another protocol version): say
                    # why in the trial's log before the hang-up ends it.
                    with contextlib.suppress(Exception):
                        sys.stderr.write(f"dvt-hpo trial: {msg.message}\n")
                        sys.stderr.flush()
                    continue
                msg_id = getattr(msg, "id", None)
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


__all__ = ["ControlClient"]
