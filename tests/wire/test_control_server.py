"""The orchestrator's end of the control channel: a real server answering real clients and raw sockets."""

from __future__ import annotations

import os
import socket
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
    Decision,
    Hello,
    LineReader,
    Report,
    encode,
    to_wire,
)
from tests.entrypoints.recording import RecordingHandler


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
    # A report's timing is kept once its answer is sent, so the last one may land after the
    # client read its answer: the connection's end is awaited, as the supervisor does.
    assert server.drain(timeout_s=10)
    timings = server.report_timings
    assert [t.step for t in timings] == list(range(100))
    assert all(t.latency_s >= 0 for t in timings)
    assert handler.hellos == [(0, os.getpid(), socket.gethostname())]
    hello = server.hellos[0]
    assert (hello.pid, hello.pgid, hello.world_size) == (os.getpid(), os.getpgrp(), 1)


def test_many_clients_connect_and_say_hello(
    server: ControlServer, handler: RecordingHandler
) -> None:
    clients = [ControlClient.connect(server.path, rank=r, world_size=4) for r in range(4)]
    try:
        assert handler.wait_hellos(4, timeout_s=10)
        assert sorted(h.rank for h in server.hellos) == [0, 1, 2, 3]
        replies = [c.request(Report(r, {}), timeout_s=10) for r, c in enumerate(clients)]
        assert all(isinstance(reply, Decision) and reply.prune is False for reply in replies)
    finally:
        for client in clients:
            client.close()
    assert server.drain(timeout_s=10)  # every connection closed and handled
    assert len(server.hellos) == 4


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
