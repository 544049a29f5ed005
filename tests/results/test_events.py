"""What the study loop tells its observers: every event has a no-op in ``BaseObserver``, so an
observer overrides only what it watches, and the events stay plain data (stdlib only)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

from dvt_hpo.results import events
from dvt_hpo.results.events import BaseObserver, StudyObserver, TrialFinished, TrialStarted


def _methods(cls: type) -> set[str]:
    return {
        name for name, _ in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("_")
    }


def test_every_observer_method_has_a_no_op_in_the_base() -> None:
    assert _methods(StudyObserver) == _methods(BaseObserver)
    base = BaseObserver()
    started = TrialStarted(number=0, trial_id=1, params={}, retry_of=None, start_time=0.0)
    assert base.trial_started(started) is None  # no user attrs to store
    for name in _methods(BaseObserver) - {"trial_started", "close"}:
        assert getattr(base, name)(object()) is None
    assert base.close() is None


def test_events_are_plain_data_with_defaults_for_what_came_later() -> None:
    finished = TrialFinished(
        number=2, trial_id=3, state="COMPLETE", value=0.5, params={"x": 1},
        reason=None, duration_s=1.0, user_attrs={},
    )  # fmt: skip
    assert finished.values == () and finished.feasible is None
    assert dataclasses.is_dataclass(finished)


def test_the_events_module_imports_only_the_standard_library() -> None:
    tree = ast.parse(Path(inspect.getfile(events)).read_text())
    imported = {
        (n.module or "").split(".")[0] if isinstance(n, ast.ImportFrom) else a.name.split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    assert imported <= {"__future__", "dataclasses", "typing", "collections"}, imported
