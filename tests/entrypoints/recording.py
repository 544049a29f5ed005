"""A :class:`~dvt_hpo.wire.control_server.TrialHandler` that records what a trial sends, for tests.

Tests await its events (no sleeps): ``hello_event`` per count of hellos, ``attr_event(key)``
when a user attr arrives, ``report_event`` after each report.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from dvt_hpo.wire.protocol import Hello


class RecordingHandler:
    """Records hellos, reports, attrs and cache calls; prunes when ``prune(step, metrics)``."""

    def __init__(
        self,
        prune: Callable[[int, dict[str, float]], bool] | None = None,
        cache: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.prune = prune or (lambda step, metrics: False)
        self.cache: dict[str, dict[str, Any]] = cache if cache is not None else {}
        self.hellos: list[tuple[int, int, str]] = []
        self.reports: list[tuple[int, dict[str, float]]] = []
        self.attrs: dict[str, Any] = {}
        self.cache_gets: list[str] = []
        self.cache_puts: list[tuple[str, dict[str, Any]]] = []
        self.protocol_errors: list[str] = []
        self.decisions: list[tuple[int, bool]] = []  # (step, prune), after each answer
        self.report_event = threading.Event()
        self._changed = threading.Condition()

    def on_hello(self, hello: Hello) -> None:
        with self._changed:
            self.hellos.append((hello.rank, hello.pid, hello.host))
            self._changed.notify_all()

    def on_protocol_error(self, message: str) -> None:
        with self._changed:
            self.protocol_errors.append(message)
            self._changed.notify_all()

    def on_reported(self, step: int, metrics: dict[str, float], prune: bool) -> None:
        with self._changed:
            self.decisions.append((step, prune))
            self._changed.notify_all()

    def on_report(self, step: int, metrics: dict[str, float]) -> bool:
        with self._changed:
            self.reports.append((step, metrics))
            self._changed.notify_all()
        self.report_event.set()
        return self.prune(step, metrics)

    def on_attrs(self, attrs: dict[str, Any]) -> None:
        with self._changed:
            self.attrs.update(attrs)
            self._changed.notify_all()

    def on_cache_get(self, key: str) -> dict[str, Any] | None:
        with self._changed:
            self.cache_gets.append(key)
            self._changed.notify_all()
            return self.cache.get(key)

    def on_cache_put(self, key: str, value: dict[str, Any]) -> None:
        with self._changed:
            self.cache_puts.append((key, value))
            self.cache[key] = value
            self._changed.notify_all()

    def wait_for(self, predicate: Callable[[RecordingHandler], bool], timeout_s: float) -> bool:
        """Wait until ``predicate(self)`` holds (re-checked on every message)."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout_s)

    def wait_attr(self, key: str, timeout_s: float = 30.0) -> Any:
        if not self.wait_for(lambda h: key in h.attrs, timeout_s):
            raise TimeoutError(f"user attr {key!r} did not arrive within {timeout_s} s")
        return self.attrs[key]

    def wait_hellos(self, n: int, timeout_s: float = 30.0) -> list[tuple[int, int, str]]:
        if not self.wait_for(lambda h: len(h.hellos) >= n, timeout_s):
            raise TimeoutError(f"{n} hello(s) did not arrive within {timeout_s} s: {self.hellos}")
        return list(self.hellos)
