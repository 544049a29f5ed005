"""The control channel's fixtures: a recording handler and a real server on a short socket."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dvt_hpo.wire.control_server import ControlServer
from tests.entrypoints.recording import RecordingHandler


@pytest.fixture
def handler() -> RecordingHandler:
    return RecordingHandler(prune=lambda step, metrics: metrics.get("loss", 0.0) > 1.0)


@pytest.fixture
def server(handler: RecordingHandler) -> Iterator[ControlServer]:
    with ControlServer(None, handler) as srv:
        yield srv
