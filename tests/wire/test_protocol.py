"""The control channel: typed messages as JSON lines over AF_UNIX, real server and clients."""

from __future__ import annotations

import math
import os
import queue
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dvt_hpo.wire.control_client import ControlClient
from dvt_hpo.wire.control_server import ControlServer
from dvt_hpo.wire.protocol import (
    PROTOCOL_VERSION,
    Attrs,
    CacheGet,
    CachePut,
    CacheReply,
    ConnectionLost,
    ControlUnavailable,
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
from tests.entrypoints.recording import RecordingHandler


@pytest.fixture
def handler() -> RecordingHandler:
    return RecordingHandler(prune=lambda step, metrics: metrics.get("loss", 0.0) > 1.0)


@pytest.fixture
def server(handler: RecordingHandler) -> Iterator[ControlServer]:
    with ControlServer(None, handler) as srv:
        yield srv


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


def test_reports_in_order_with_decisions_matched_by_id(
    server: ControlServer, handler: RecordingHandler
) -> None:
    with ControlClient.connect(server.path, rank=0) as client:
        decisions = []
        for step in range(100):
            loss = 2.0 if step % 7 == 0 else 0.5
            reply = client.request(Report(step, {"loss": loss}), timeout_s=10)
            assert isinstance(reply, Decision)
            decisions.append(reply.prune)
    assert [step for step, _ in handler.reports] == list(range(100))
    assert decisions == [step % 7 == 0 for step in range(100)]
    timings = server.report_timings
    assert [t.step for t in timings] == list(range(100))
    assert all(t.latency_s >= 0 for t in timings)
    assert handler.hellos == [(0, os.getpid(), socket.gethostname())]
    hello = server.hellos[0]
    assert (hello.pid, hello.pgid, hello.world_size) == (os.getpid(), os.getpgrp(), 1)


def test_concurrent_requests_on_one_client_get_their_own_replies(
    server: ControlServer,
) -> None:
    errors: list[str] = []
    with ControlClient.connect(server.path) as client:

        def ask(thread_index: int) -> None:
            for i in range(40):
                step = thread_index * 1000 + i
                loss = 2.0 if step % 2 else 0.5
                reply = client.request(Report(step, {"loss": loss}), timeout_s=10)
                if not isinstance(reply, Decision) or reply.prune != bool(step % 2):
                    errors.append(f"step {step}: {reply}")

        threads = [threading.Thread(target=ask, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert errors == []


def test_many_clients_connect_and_say_hello(
    server: ControlServer, handler: RecordingHandler
) -> None:
    clients = [ControlClient.connect(server.path, rank=r, world_size=4) for r in range(4)]
    try:
        assert server.wait_hellos(4, timeout_s=10)
        assert sorted(h.rank for h in server.hellos) == [0, 1, 2, 3]
        assert server.n_connections == 4
        replies = [c.request(Report(r, {}), timeout_s=10) for r, c in enumerate(clients)]
        assert all(isinstance(reply, Decision) and reply.prune is False for reply in replies)
    finally:
        for client in clients:
            client.close()
    assert server.drain(timeout_s=10)
    assert server.n_connections == 0 and server.n_accepted == 4


class _FailingHandler(RecordingHandler):
    def on_report(self, step: int, metrics: dict[str, float]) -> bool:
        raise RuntimeError("storage down")

    def on_cache_get(self, key: str) -> dict[str, Any] | None:
        raise RuntimeError("storage down")

    def on_attrs(self, attrs: dict[str, Any]) -> None:
        raise RuntimeError("storage down")


def test_handler_errors_become_safe_replies_and_the_connection_lives_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with ControlServer(None, _FailingHandler()) as server:
        with ControlClient.connect(server.path) as client:
            client.send(Attrs({"a": 1}))
            decision = client.request(Report(0, {}), 10)
            cache = client.request(CacheGet("k"), 10)
            again = client.request(Report(1, {}), 10)
        assert isinstance(decision, Decision) and decision.prune is False
        assert isinstance(cache, CacheReply) and cache.value is None
        assert isinstance(again, Decision) and again.prune is False
    assert "storage down" in caplog.text


def test_a_malformed_line_is_skipped_not_fatal(server: ControlServer) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
        raw.connect(server.path)
        raw.sendall(b"garbage\n" + encode({"type": "report", "id": 9, "step": 0, "metrics": {}}))
        reply = LineReader(raw).read()
    assert reply == {"type": "decision", "id": 9, "prune": False}


def test_server_close_fires_the_client_watchdog(handler: RecordingHandler) -> None:
    lost = threading.Event()
    server = ControlServer(None, handler)
    client = ControlClient.connect(server.path, on_lost=lost.set)
    try:
        assert server.wait_hellos(1, timeout_s=10)
        path = server.path
        server.close()
        assert lost.wait(10), "on_lost was not called after the server closed"
        assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))
        with pytest.raises(ConnectionLost):
            client.request(Report(0, {}), 10)
    finally:
        client.close()


def test_a_request_waiting_when_the_server_closes_raises_connection_lost() -> None:
    release = threading.Event()

    class Blocking(RecordingHandler):
        def on_report(self, step: int, metrics: dict[str, float]) -> bool:
            release.wait(10)
            return False

    server = ControlServer(None, Blocking())
    outcome: queue.Queue[BaseException | Any] = queue.Queue()
    with ControlClient.connect(server.path) as client:

        def ask() -> None:
            try:
                outcome.put(client.request(Report(0, {}), 30))
            except BaseException as exc:  # noqa: BLE001 - the test inspects it
                outcome.put(exc)

        thread = threading.Thread(target=ask)
        thread.start()
        assert server.wait_hellos(1, timeout_s=10)
        closer = threading.Thread(target=server.close)
        closer.start()
        assert isinstance(outcome.get(timeout=10), ConnectionLost)
        release.set()
        closer.join(10)
        thread.join(10)


def test_client_close_does_not_fire_the_watchdog(server: ControlServer) -> None:
    lost = threading.Event()
    client = ControlClient.connect(server.path, on_lost=lost.set)
    client.close()
    assert server.drain(timeout_s=10)
    assert not lost.is_set()


def test_request_timeout_returns_none_and_late_replies_are_dropped() -> None:
    release = threading.Event()

    class Slow(RecordingHandler):
        def on_report(self, step: int, metrics: dict[str, float]) -> bool:
            if step == 0:
                release.wait(10)
            return step == 0

    with ControlServer(None, Slow()) as server, ControlClient.connect(server.path) as client:
        assert client.request(Report(0, {}), 0.2) is None
        release.set()
        reply = client.request(Report(1, {}), 10)
        assert isinstance(reply, Decision) and reply.prune is False  # not step 0's late "True"


def test_cache_replies_are_one_snapshot_per_server() -> None:
    handler = RecordingHandler()
    with (
        ControlServer(None, handler) as srv,
        ControlClient.connect(srv.path, rank=0) as c0,
        ControlClient.connect(srv.path, rank=1) as c1,
    ):
        first = c0.request(CacheGet("k"), 10)
        handler.cache["k"] = {"batch_size": 64}  # another trial wrote it meanwhile
        second = c1.request(CacheGet("k"), 10)
        assert isinstance(first, CacheReply) and isinstance(second, CacheReply)
        assert first.value is None and second.value is None
        assert handler.cache_gets == ["k"]
        c0.send(CachePut("k", {"batch_size": 32}))
        assert handler.wait_for(lambda h: len(h.cache_puts) == 1, 10)
        third = c1.request(CacheGet("k"), 10)
        assert isinstance(third, CacheReply) and third.value == {"batch_size": 32}


def test_connecting_to_a_missing_socket_says_the_orchestrator_is_gone(tmp_path: Path) -> None:
    with pytest.raises(ControlUnavailable, match="orchestrator is gone"):
        ControlClient.connect(str(tmp_path / "nothing.sock"))


def test_socket_paths_must_fit_af_unix(handler: RecordingHandler, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at most 107 bytes"):
        ControlServer(str(tmp_path / ("x" * 120) / "c.sock"), handler)


def test_an_explicit_path_is_used_and_removed(handler: RecordingHandler, tmp_path: Path) -> None:
    path = tmp_path / "c.sock"
    if len(str(path)) > 100:
        pytest.skip("tmp_path too long for AF_UNIX")
    with ControlServer(str(path), handler) as srv:
        assert srv.path == str(path) and path.is_socket()
    assert not path.exists()


# -- typed messages and the version check ----------------------------------------------------


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


def test_an_unknown_request_gets_an_error_reply_and_the_connection_lives_on(
    server: ControlServer,
) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
        raw.connect(server.path)
        raw.sendall(
            encode({"type": "frobnicate", "id": 3})
            + encode({"type": "report", "id": 4, "step": 0, "metrics": {}})
        )
        reader = LineReader(raw)
        first, second = reader.read(), reader.read()
    assert first is not None and first["type"] == "error" and first["id"] == 3
    assert second == {"type": "decision", "id": 4, "prune": False}


def test_a_hello_of_another_protocol_version_is_refused_and_the_trial_cut_off(
    server: ControlServer, handler: RecordingHandler
) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
        raw.connect(server.path)
        raw.sendall(encode(to_wire(Hello(PROTOCOL_VERSION + 1, rank=0))))
        reader = LineReader(raw)
        refusal = reader.read()
        after = reader.read()  # the server hung up: end of stream
    assert refusal is not None and refusal["type"] == "error" and refusal["id"] is None
    assert f"protocol {PROTOCOL_VERSION + 1}" in refusal["message"]
    assert after is None
    assert len(handler.protocol_errors) == 1
    assert f"this orchestrator {PROTOCOL_VERSION}" in handler.protocol_errors[0]
    assert server.hellos == []


def test_the_handler_hears_of_each_report_after_its_decision_was_sent(
    server: ControlServer, handler: RecordingHandler
) -> None:
    with ControlClient.connect(server.path) as client:
        client.request(Report(0, {"loss": 2.0}), 10)
        client.request(Report(1, {"loss": 0.5}), 10)
    assert handler.wait_for(lambda h: len(h.decisions) == 2, 10)
    assert handler.decisions == [(0, True), (1, False)]
