"""The trial process's end of the control channel: requests matched to replies, the watchdog."""

from __future__ import annotations

import os
import queue
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from dvt_hpo.wire.control_client import ControlClient
from dvt_hpo.wire.control_server import ControlServer, short_socket_dir
from dvt_hpo.wire.protocol import (
    ConnectionLost,
    ControlUnavailable,
    Decision,
    ErrorReply,
    LineReader,
    Report,
    encode,
    to_wire,
)
from tests.entrypoints.recording import RecordingHandler


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


def test_server_close_fires_the_client_watchdog(handler: RecordingHandler) -> None:
    lost = threading.Event()
    server = ControlServer(None, handler)
    client = ControlClient.connect(server.path, on_lost=lost.set)
    try:
        assert handler.wait_hellos(1, timeout_s=10)
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

    blocking = Blocking()
    server = ControlServer(None, blocking)
    outcome: queue.Queue[BaseException | Any] = queue.Queue()
    with ControlClient.connect(server.path) as client:

        def ask() -> None:
            try:
                outcome.put(client.request(Report(0, {}), 30))
            except BaseException as exc:  # noqa: BLE001 - the test inspects it
                outcome.put(exc)

        thread = threading.Thread(target=ask)
        thread.start()
        assert blocking.wait_hellos(1, timeout_s=10)
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


def test_connecting_to_a_missing_socket_says_the_orchestrator_is_gone(tmp_path: Path) -> None:
    with pytest.raises(ControlUnavailable, match="orchestrator is gone"):
        ControlClient.connect(str(tmp_path / "nothing.sock"))


def test_connect_without_a_path_reads_the_environment(
    server: ControlServer, handler: RecordingHandler, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DVT_HPO_CONTROL", server.path)
    with ControlClient.connect(rank=2, local_rank=0, world_size=3) as client:
        assert client.path == server.path
        assert handler.wait_hellos(1, timeout_s=10)
    assert (server.hellos[0].rank, server.hellos[0].world_size) == (2, 3)


def test_connect_without_a_path_or_the_environment_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DVT_HPO_CONTROL", raising=False)
    with pytest.raises(ControlUnavailable, match=r"\$DVT_HPO_CONTROL is not set"):
        ControlClient.connect()


def test_the_helpers_speak_for_report_cache_and_attrs(
    server: ControlServer, handler: RecordingHandler
) -> None:
    handler.cache["probe"] = {"batch_size": 16}
    with ControlClient.connect(server.path) as client:
        assert client.report(0, {"loss": 2.0}, timeout_s=10) is True  # the handler prunes > 1
        assert client.report(1, {"loss": 0.5}, timeout_s=10) is False
        assert client.cache_get("probe", timeout_s=10) == {"batch_size": 16}
        assert client.cache_get("unknown", timeout_s=10) is None
        client.cache_put("new", {"batch_size": 8})
        client.set_attrs({"host_gpu": "A100"})
        assert handler.wait_for(lambda h: h.cache_puts and "host_gpu" in h.attrs, 10)
    assert handler.cache_puts == [("new", {"batch_size": 8})]
    assert handler.attrs == {"host_gpu": "A100"}


def test_a_refusal_is_said_on_stderr_and_the_hang_up_fires_the_watchdog(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """An orchestrator of another protocol version answers the hello with an error and hangs up;
    the trial says why before its watchdog ends it. A line it cannot read is skipped."""
    folder = short_socket_dir()
    path = os.path.join(folder, "c.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    lost = threading.Event()
    try:
        client = ControlClient.connect(path, on_lost=lost.set)
        conn, _ = listener.accept()
        with conn:
            assert LineReader(conn).read() is not None  # the hello
            conn.sendall(b"garbage\n" + encode(to_wire(ErrorReply(None, "protocol 3 refused"))))
        assert lost.wait(10), "the hang-up did not fire the watchdog"
        with pytest.raises(ConnectionLost):
            client.request(Report(0, {}), 10)
        client.close()
    finally:
        listener.close()
        os.unlink(path)
        os.rmdir(folder)
    assert "dvt-hpo trial: protocol 3 refused" in capfd.readouterr().err
