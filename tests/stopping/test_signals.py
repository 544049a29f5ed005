"""The orchestrator's stop signals, including an interrupt that Python drops."""

from __future__ import annotations

import os
import queue
import signal

import pytest

from dvt_hpo.stopping.signals import StopSignals
from tests.entrypoints.dropped import deliver_in_weakref_callback


def test_the_first_signal_interrupts_and_later_ones_are_ignored() -> None:
    previous = signal.getsignal(signal.SIGTERM)
    stop = StopSignals().install()
    try:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
        assert stop.received == signal.SIGTERM
        os.kill(os.getpid(), signal.SIGINT)  # ignored: the stop is being recorded
        os.kill(os.getpid(), signal.SIGTERM)
    finally:
        stop.restore()
    assert signal.getsignal(signal.SIGTERM) == previous


def test_an_interrupt_dropped_by_python_is_raised_again() -> None:
    stop = StopSignals().install()
    try:
        dropped = deliver_in_weakref_callback(signal.SIGINT)
        assert [type(d.exc_value) for d in dropped] == [KeyboardInterrupt]
        assert stop.received == signal.SIGINT
        events: queue.Queue[int] = queue.Queue()
        events.put(1)
        with pytest.raises(KeyboardInterrupt):
            stop.get(events, 600.0)  # not a 600 s wait, nor the queued item
    finally:
        stop.restore()


def test_get_returns_an_event_or_none_after_the_timeout() -> None:
    stop = StopSignals()
    events: queue.Queue[int] = queue.Queue()
    events.put(7)
    assert stop.get(events, 5.0) == 7
    assert stop.get(events, 0.05) is None


def test_a_signal_inside_a_deferred_block_is_raised_by_the_next_check() -> None:
    stop = StopSignals().install()
    try:
        with stop.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass  # the handler has run by now: it did not raise
        assert stop.received == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):
            stop.check()
    finally:
        stop.restore()
