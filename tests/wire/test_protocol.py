"""The control channel's wire format: typed messages as JSON lines, read back whole from a stream."""

from __future__ import annotations

import math
import queue
import socket
import threading
from typing import Any

import pytest

from dvt_hpo.wire.protocol import (
    PROTOCOL_VERSION,
    Attrs,
    CacheGet,
    CachePut,
    CacheReply,
    Decision,
    ErrorReply,
    Hello,
    LineReader,
    ProtocolError,
    Report,
    decode,
    encode,
    from_wire,
    to_wire,
)


def test_encode_decode_round_trip_keeps_nan_and_infinity() -> None:
    msg = {"type": "report", "id": 3, "step": 1, "metrics": {"loss": math.nan, "x": math.inf}}
    line = encode(msg)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    back = decode(line)
    assert back["id"] == 3 and math.isnan(back["metrics"]["loss"])
    assert back["metrics"]["x"] == math.inf


@pytest.mark.parametrize(
    "line", [b"not json", b"[1, 2]", b'{"id": 1}', b'{"type": 3}', b"\xff\xfe"]
)
def test_decode_rejects_what_is_not_a_typed_object(line: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode(line)


def test_encode_needs_a_type() -> None:
    with pytest.raises(ProtocolError, match="type"):
        encode({"id": 1})


def test_line_reader_joins_partial_reads_and_splits_batched_lines() -> None:
    a, b = socket.socketpair()
    with a, b:
        reader = LineReader(b)
        got: queue.Queue[Any] = queue.Queue()
        first = encode(Report(0, {"loss": 0.5}))
        a.sendall(first[:7])  # the reader blocks on a line without its end
        thread = threading.Thread(target=lambda: got.put(reader.read()))
        thread.start()
        second = encode({"type": "attrs", "attrs": {"k": "v"}})
        a.sendall(first[7:] + second + b'{"type": "hel')
        thread.join(5)
        assert got.get(timeout=5)["step"] == 0
        assert reader.read() == {"type": "attrs", "attrs": {"k": "v"}}
        a.sendall(b'lo"}\n')
        assert reader.read() == {"type": "hello"}
        a.shutdown(socket.SHUT_WR)
        assert reader.read() is None


@pytest.mark.parametrize(
    "msg",
    [
        Hello(PROTOCOL_VERSION, rank=1, local_rank=1, world_size=2, pid=7, pgid=7, host="h"),
        Report(3, {"loss": 0.5, "acc": 1.0}, id=4),
        Decision(4, True),
        Attrs({"batch_size": 64, "nested": {"a": [1, 2]}}),
        CacheGet("k", id=5),
        CacheReply(5, None),
        CacheReply(6, {"batch_size": 8}),
        CachePut("k", {"batch_size": 8}),
        ErrorReply(None, "no"),
    ],
)
def test_every_message_round_trips_through_a_json_line(msg: Any) -> None:
    assert from_wire(decode(encode(to_wire(msg)))) == msg


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"type": "frobnicate"}, "unknown message type 'frobnicate'"),
        ({"type": "report", "metrics": {}}, "missing required key 'step'"),
        ({"type": "report", "step": "3", "metrics": {}}, "step: expected int"),
        ({"type": "report", "step": True, "metrics": {}}, "step: expected int"),
        ({"type": "report", "step": 1, "metrics": {"a": "x"}}, "metrics.a: expected float"),
        ({"type": "decision", "id": 1, "prune": 1}, "prune: expected bool"),
        ({"type": "hello", "protocol": 2, "rank": 0, "extra": 1}, "unknown key 'extra'"),
    ],
)
def test_from_wire_checks_types_and_keys(data: dict[str, Any], error: str) -> None:
    with pytest.raises(ProtocolError, match=error):
        from_wire(data)
