"""The trial protocol's wire format: version, typed messages, JSON lines, exit codes.

Stdlib only (the orchestrator imports it; it must never pull in torch). See docs/protocol.md.
The orchestrator's end is :mod:`dvt_hpo.wire.control_server`, the trial's :mod:`dvt_hpo.wire.control_client`.

Every message is a frozen dataclass with a ``TYPE``; :func:`to_wire` / :func:`from_wire` turn
it into / out of a JSON object whose ``type`` names it, checking every field's JSON type.
Fields are checked by the one schema engine, in its mode for what crosses a process boundary
(:func:`dvt_hpo.config.schema.from_wire_mapping`), as the payload and the result are.
"""

from __future__ import annotations

import dataclasses
import json
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from dvt_hpo.config.schema import from_wire_mapping
from dvt_hpo.report import ENV_REPORT, PRUNED_EXIT_CODE

# 2: typed payload (batch_size as the spec's section, cache_key, devices, limits), version
# checked on hello.
PROTOCOL_VERSION = 2

ENV_CONTROL = "DVT_HPO_CONTROL"
ENV_MEMORY_LIMIT = "DVT_HPO_MEMORY_LIMIT"
# time.time() when the orchestrator launched the trial: the trial process measures its start-up.
ENV_LAUNCHED = "DVT_HPO_LAUNCHED_UNIX"

# Exit codes of ``python -m dvt_hpo.trial`` (the result file says more; these let the
# orchestrator tell outcomes apart when no result file could be written).
EXIT_OK = 0
EXIT_ERROR = 1  # the entry point raised (including MemoryError); result has the reason
EXIT_BAD_PAYLOAD = 2  # the payload could not be read or is malformed; no result file
# ctx.report raised TrialPruned and the entry point let it through; a command's script ends
# with the same status when dvt_hpo.report tells it the study pruned it (defined there, as
# that file is self-contained).
EXIT_PRUNED = PRUNED_EXIT_CODE
EXIT_NO_ORCHESTRATOR = 4  # the control socket was unreachable at start: nobody to report to
EXIT_STOPPED = 128 + 15  # stopped by SIGTERM (the shell convention for a signal's death)

# A line longer than this is a bug (metrics are small); it ends the connection, not the process.
MAX_LINE_BYTES = 16 * 1024 * 1024
# AF_UNIX paths are limited to ~107 bytes on Linux (sun_path is 108 bytes with the NUL).
MAX_SOCKET_PATH_BYTES = 107


class ProtocolError(ValueError):
    """A line that is not a JSON object with a string ``type``."""


class LineTooLong(ProtocolError):
    """A peer sent more than ``MAX_LINE_BYTES`` without a newline: the stream cannot resync."""


class ControlUnavailable(ConnectionError):
    """The trial process could not reach the orchestrator's control socket."""


class ConnectionLost(ConnectionError):
    """The control connection ended while a request waited for its reply."""


# -- encoding ----------------------------------------------------------------------------


def encode(msg: Mapping[str, Any] | Message) -> bytes:
    """One message (typed, or its JSON object) as one JSON line (UTF-8, newline-terminated).

    NaN and infinities are written as Python's JSON extension literals (``NaN``,
    ``Infinity``): a diverged loss is data the orchestrator must see, and both ends are Python.
    """
    if not isinstance(msg, Mapping):
        msg = to_wire(msg)
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


# -- typed messages ------------------------------------------------------------------------


@dataclass(frozen=True)
class Hello:
    """trial -> orchestrator, once per process at connect. ``pid``/``pgid`` are diagnostics
    (tests check that every rank is gone after a stop); the orchestrator stops trials through
    their process tree, not through these."""

    TYPE: ClassVar[str] = "hello"
    protocol: int
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    pid: int = 0
    pgid: int = 0
    host: str = ""


@dataclass(frozen=True)
class Report:
    """trial -> orchestrator: the metrics of one step; answered by a :class:`Decision`."""

    TYPE: ClassVar[str] = "report"
    step: int
    metrics: dict[str, float]
    id: int | None = None


@dataclass(frozen=True)
class Decision:
    TYPE: ClassVar[str] = "decision"
    id: int | None
    prune: bool


@dataclass(frozen=True)
class Attrs:
    """trial -> orchestrator: user attrs to store on the trial (no reply)."""

    TYPE: ClassVar[str] = "attrs"
    attrs: dict[str, Any]


@dataclass(frozen=True)
class CacheGet:
    TYPE: ClassVar[str] = "cache_get"
    key: str
    id: int | None = None


@dataclass(frozen=True)
class CacheReply:
    TYPE: ClassVar[str] = "cache"
    id: int | None
    value: dict[str, Any] | None


@dataclass(frozen=True)
class CachePut:
    TYPE: ClassVar[str] = "cache_put"
    key: str
    value: dict[str, Any]


@dataclass(frozen=True)
class ErrorReply:
    """orchestrator -> trial: a request it cannot answer, or a refused hello."""

    TYPE: ClassVar[str] = "error"
    id: int | None
    message: str


Message = Hello | Report | Decision | Attrs | CacheGet | CacheReply | CachePut | ErrorReply
MESSAGE_TYPES: dict[str, type[Any]] = {
    cls.TYPE: cls
    for cls in (Hello, Report, Decision, Attrs, CacheGet, CacheReply, CachePut, ErrorReply)
}


def to_wire(msg: Message) -> dict[str, Any]:
    return {"type": msg.TYPE, **dataclasses.asdict(msg)}


def from_wire(data: Mapping[str, Any]) -> Message:
    """The typed message of a decoded line; :class:`ProtocolError` for an unknown type or a
    field of the wrong JSON type."""
    kind = data.get("type")
    cls = MESSAGE_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ProtocolError(f"unknown message type {kind!r}; known: {sorted(MESSAGE_TYPES)}")
    body = {k: v for k, v in data.items() if k != "type"}
    message: Message = from_wire_mapping(cls, body, f"a {kind!r} message", ProtocolError)
    return message


def hello(rank: int, local_rank: int, world_size: int, pid: int, pgid: int) -> Hello:
    return Hello(PROTOCOL_VERSION, rank, local_rank, world_size, pid, pgid, socket.gethostname())


def version_mismatch(hello: Hello) -> str | None:
    """Why a hello is refused, or None."""
    if hello.protocol == PROTOCOL_VERSION:
        return None
    return (
        f"the trial process speaks dvt-hpo protocol {hello.protocol}, this orchestrator "
        f"{PROTOCOL_VERSION}: run both with the same dvt-hpo installation"
    )


# -- one JSON-type checker for everything that crosses a process boundary --------------------


__all__ = [
    "ENV_CONTROL",
    "ENV_REPORT",
    "ENV_MEMORY_LIMIT",
    "EXIT_BAD_PAYLOAD",
    "EXIT_ERROR",
    "EXIT_NO_ORCHESTRATOR",
    "EXIT_OK",
    "EXIT_PRUNED",
    "EXIT_STOPPED",
    "MESSAGE_TYPES",
    "PROTOCOL_VERSION",
    "Attrs",
    "CacheGet",
    "CachePut",
    "CacheReply",
    "ConnectionLost",
    "ControlUnavailable",
    "Decision",
    "ErrorReply",
    "Hello",
    "LineReader",
    "LineTooLong",
    "Message",
    "ProtocolError",
    "Report",
    "decode",
    "encode",
    "from_wire",
    "hello",
    "to_wire",
    "version_mismatch",
]
