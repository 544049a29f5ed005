"""The orchestrator's Ctrl-C and SIGTERM: the first one stops the run, later ones are ignored.

The first SIGINT or SIGTERM raises ``KeyboardInterrupt`` so that the running trials are
stopped and recorded (FAIL interrupted + a WAITING copy) before the exit; later ones are
ignored, so that recording is never cut short. The signal is also remembered, because Python
runs a signal handler wherever the main thread happens to be, and a ``KeyboardInterrupt``
raised inside a weakref callback or a ``__del__`` (SQLAlchemy's, during a garbage collection)
is printed as "Exception ignored" and dropped. A run whose one interrupt was dropped would go
on with every later signal ignored; :meth:`StopSignals.get` raises it again within
``CHECK_INTERVAL_S``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from queue import Empty, Queue
from types import FrameType
from typing import TypeVar

T = TypeVar("T")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

# How long the loop may wait between two checks: the delay before a dropped interrupt is
# acted on.
CHECK_INTERVAL_S = 1.0


class StopSignals:
    """The handlers, from :meth:`install` (main thread only) to :meth:`restore`."""

    def __init__(self, event: threading.Event | None = None) -> None:
        self.received: signal.Signals | None = None
        # Set with ``received``, for other threads: a trial's thread that saw its process die
        # of a signal waits on it briefly (see TrialRun), as a Slurm job's stop signals the
        # trials and their worker at the same instant.
        self.event = event if event is not None else threading.Event()
        self._previous: dict[int, object] = {}
        self._deferring = 0

    def install(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}
        return self

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        for stop_signal in STOP_SIGNALS:
            signal.signal(stop_signal, signal.SIG_IGN)
        self.received = signal.Signals(signum)
        self.event.set()
        if not self._deferring:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A block a stop signal does not cut short: received inside it, it is remembered and
        raised by the next :meth:`check` (a study's ``ask`` creates the trial, then reads it
        back: cut in between, the trial is RUNNING and its worker never learns its id)."""
        self._deferring += 1
        try:
            yield
        finally:
            self._deferring -= 1

    def check(self) -> None:
        """Raise the ``KeyboardInterrupt`` of a stop signal already received (its own raise
        may have been dropped; see the module's docstring)."""
        if self.received is not None:
            raise KeyboardInterrupt

    def get(self, events: Queue[T], timeout_s: float) -> T | None:
        """``events.get(timeout=timeout_s)``, None when it times out, checking for a received
        stop signal at least every ``CHECK_INTERVAL_S``."""
        end = time.monotonic() + timeout_s
        while True:
            self.check()
            left_s = end - time.monotonic()
            try:
                return events.get(timeout=max(0.0, min(left_s, CHECK_INTERVAL_S)))
            except Empty:
                if left_s <= CHECK_INTERVAL_S:
                    return None


__all__ = ["CHECK_INTERVAL_S", "STOP_SIGNALS", "StopSignals"]
