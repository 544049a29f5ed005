"""The study loop's observers, called so that none of them can fail or stall the study.

Each call is wrapped: an observer that raises costs one warning line (through the loop's
output) and the study goes on. The events are defined in :mod:`dvt_hpo.events`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dvt_hpo.events import (
    StudyEnded,
    StudyObserver,
    StudyStarted,
    TrialFinished,
    TrialReported,
    TrialStarted,
)


class Observers:
    """Calls every observer; one that raises costs a warning line, never the study."""

    def __init__(self, observers: Sequence[StudyObserver], out: Callable[[str], None]) -> None:
        self._observers = list(observers)
        self._out = out

    def _call(self, method: str, event: Any) -> list[Any]:
        results = []
        for observer in self._observers:
            try:
                results.append(getattr(observer, method)(event))
            except Exception as exc:  # noqa: BLE001 - an observer never fails the study
                name = type(observer).__name__
                self._out(f"warning: observer {name}.{method} failed: {type(exc).__name__}: {exc}")
        return results

    def study_started(self, event: StudyStarted) -> None:
        self._call("study_started", event)

    def trial_started(self, event: TrialStarted) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        for returned in self._call("trial_started", event):
            if isinstance(returned, Mapping):
                attrs.update(returned)
        return attrs

    def trial_reported(self, event: TrialReported) -> None:
        self._call("trial_reported", event)

    def trial_finished(self, event: TrialFinished) -> None:
        self._call("trial_finished", event)

    def study_ended(self, event: StudyEnded) -> None:
        self._call("study_ended", event)
        for observer in self._observers:
            with contextlib.suppress(Exception):
                observer.close()


__all__ = ["Observers"]
