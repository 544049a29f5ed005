"""The observers' fan-out: every call wrapped, a raising observer is one warning line."""

from __future__ import annotations

from typing import Any

from dvt_hpo.results.events import BaseObserver, TrialStarted
from dvt_hpo.study.observers import Observers


class Broken(BaseObserver):
    def trial_started(self, event: TrialStarted) -> dict[str, Any] | None:
        raise RuntimeError("tracking server down")


class Tagging(BaseObserver):
    def __init__(self, attrs: dict[str, Any] | None) -> None:
        self.attrs = attrs

    def trial_started(self, event: TrialStarted) -> dict[str, Any] | None:
        return self.attrs


EVENT = TrialStarted(number=4, trial_id=5, params={}, retry_of=None, start_time=0.0)


def test_an_observer_that_raises_is_one_warning_line() -> None:
    lines: list[str] = []
    observers = Observers([Broken()], lines.append)
    assert observers.trial_started(EVENT) == {}
    assert lines == [
        "warning: observer Broken.trial_started failed: RuntimeError: tracking server down"
    ]


def test_the_attrs_of_every_observer_are_merged_and_none_is_nothing() -> None:
    lines: list[str] = []
    observers = Observers(
        [Tagging({"a": 1}), Broken(), Tagging(None), Tagging({"b": 2})], lines.append
    )
    assert observers.trial_started(EVENT) == {"a": 1, "b": 2}
    assert len(lines) == 1
