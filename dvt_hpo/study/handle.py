"""What one trial's run may use of the study it belongs to: a :class:`StudyHandle`.

The study loop (:mod:`dvt_hpo.study.loop`) opens the study and hands each
:class:`~dvt_hpo.study.trial_run.TrialRun` this handle; the run gives its outcome back through
:attr:`StudyHandle.finished` and never reaches into the loop, so the loop imports the run and not
the other way round.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from dvt_hpo.batch.cache import StudyCache
from dvt_hpo.optuna_api.private import set_trial_user_attrs
from dvt_hpo.process.launch import Launcher
from dvt_hpo.results.outcome import TrialOutcome
from dvt_hpo.study.observers import Observers

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.budget.compute import BudgetWatch
    from dvt_hpo.spec.model import StudySpec

T = TypeVar("T")


class Retrying(Protocol):
    """A call on the study's storage, retried through database outages (``StudyRunner.db``)."""

    def __call__(self, call: Callable[[], T], what: str) -> T: ...


@dataclass(frozen=True)
class StudyHandle:
    """The open study as a trial's run sees it.

        ``lock`` serialises every storage call of this orchestrator (Optuna's storages are not
        thread-safe across trials' threads); ``db`` retries a call through outages; ``finished``
        takes the trial's outcome (the loop's event queue); ``fail_attempt`` records a trial FAIL for a
    retry, exactly once whoever repairs it (:func:`dvt_hpo.recovery.retries.fail_attempt`).
    """

    spec: StudySpec
    study: optuna.Study
    storage: Any
    lock: threading.RLock
    db: Retrying
    cache: StudyCache
    observers: Observers
    launcher: Launcher
    child_env: Mapping[str, str]
    finished: Callable[[TrialOutcome], None]
    fail_attempt: Callable[[int], bool]  # FAIL one of our attempts and have its copy enqueued
    worker_stopped: threading.Event  # set when the worker is told to stop (Ctrl-C, SIGTERM)
    # study.budget (None without one): a strict one is asked at each report; its spent / total
    # goes with each finished trial's event.
    budget: BudgetWatch | None = None
    out: Callable[[str], None] | None = None  # the run's lines (trials.resume says one)

    def set_trial_attrs(self, trial_id: int, attrs: Mapping[str, Any]) -> None:
        """Store ``attrs`` as user attrs of trial ``trial_id`` in one transaction (not one per
        attr, each a sync of SQLite's log); a trial another worker already failed as stale
        (and retried) keeps its record."""
        import optuna

        with self.lock:
            try:
                self.db(lambda: set_trial_user_attrs(self.storage, trial_id, attrs), "recording")
            except optuna.exceptions.UpdateFinishedTrialError:
                return


__all__ = ["Retrying", "StudyHandle"]
