"""Crash recovery, retries and the study's budget, shared by every worker through the storage.

- A failed attempt is retried at most once, whoever notices the failure first:
  :func:`fail_attempt` moves the trial to FAIL only if it is not finished yet (the storage
  refuses to update a finished trial, atomically), and only the worker whose update went
  through enqueues the WAITING copy. Two workers that both see the same trial die (one by its
  Ctrl-C, one by the stale heartbeat) therefore leave one copy, not two.
- :func:`reconcile` fails the RUNNING trials whose heartbeat went stale (their orchestrator
  died) and re-enqueues them, through Optuna's own ``fail_stale_trials`` where the storage has
  heartbeats, and the same rule on a trial attr for journal files.
- :class:`Ledger` counts the budget (``study.n_trials``) without loading every trial on each
  launch: finished trials never change, so each is read once; only unfinished ones are read
  again.

Retry chains are read through Optuna's public ``RetryHeartbeatStaleTrialCallback``
``retried_trial_number`` / ``retry_history``.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dvt_hpo.budget import OVER_BUDGET_ATTR, Attempt, uncounted, uncounted_attempts
from dvt_hpo.storage import retry_callback, supports_heartbeat

if TYPE_CHECKING:
    import optuna

HEARTBEAT_ATTR = "dvt_hpo:heartbeat"  # journal storages: the trial's last heartbeat (time.time)


def _state(name: str) -> Any:
    from optuna.trial import TrialState

    return TrialState[name]


def retried_trial_number(trial: optuna.trial.FrozenTrial) -> int | None:
    from optuna.storages import RetryHeartbeatStaleTrialCallback

    with _quiet():
        return RetryHeartbeatStaleTrialCallback.retried_trial_number(trial)


def retry_history(trial: optuna.trial.FrozenTrial) -> list[int]:
    from optuna.storages import RetryHeartbeatStaleTrialCallback

    with _quiet():
        return RetryHeartbeatStaleTrialCallback.retry_history(trial)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    # Both helpers are public since Optuna 3.0 but still flagged experimental.
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield


def fail_attempt(
    study: optuna.Study, storage: Any, trial_id: int, *, retry: bool, max_retries: int
) -> bool:
    """Record the attempt FAIL and, when ``retry``, enqueue one WAITING copy of its params.

    False when the trial was already finished (another worker failed it as stale, and that
    worker enqueued the copy): then nothing is written here.
    """
    import optuna

    try:
        failed = storage.set_trial_state_values(trial_id, _state("FAIL"))
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    if failed and retry:
        retry_callback(max_retries)(study, storage.get_trial(trial_id))
    return bool(failed)


def record_heartbeat(storage: Any, trial_id: int) -> None:
    if supports_heartbeat(storage):
        storage.record_heartbeat(trial_id)
    else:
        storage.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, time.time())


def reconcile(
    study: optuna.Study,
    storage: Any,
    *,
    grace_period_s: float,
    max_retries: int,
    is_ours: Callable[[int], bool],
) -> None:
    """Fail trials whose orchestrator died (stale heartbeat) and re-enqueue their params."""
    import optuna

    if supports_heartbeat(storage):
        optuna.storages.fail_stale_trials(study)
        return
    now = time.time()
    for t in study.get_trials(deepcopy=False, states=(_state("RUNNING"),)):
        if is_ours(t.number):
            continue
        beat = t.system_attrs.get(HEARTBEAT_ATTR)
        if beat is None and t.datetime_start is not None:
            beat = t.datetime_start.timestamp()
        if beat is None or now - float(beat) <= grace_period_s:
            continue
        fail_attempt(study, storage, t._trial_id, retry=True, max_retries=max_retries)


def heartbeat_ages(storage: Any, trials: list[optuna.trial.FrozenTrial]) -> dict[int, float]:
    """Seconds since each trial's last heartbeat, by trial number, as the stale rule sees them
    (the database's clock for RDB storages); trials without one are left out. Best effort:
    this only informs the "waiting for" line, so a storage it cannot read gives ``{}``."""
    if not trials:
        return {}
    if not supports_heartbeat(storage):
        now = time.time()
        ages: dict[int, float] = {}
        for t in trials:
            beat = t.system_attrs.get(HEARTBEAT_ATTR)
            if beat is None and t.datetime_start is not None:
                beat = t.datetime_start.timestamp()
            if beat is not None:
                ages[t.number] = max(0.0, now - float(beat))
        return ages
    try:
        import sqlalchemy
        from optuna.storages._rdb import models  # no public reader of heartbeats

        by_id = {t._trial_id: t.number for t in trials}
        model = models.TrialHeartbeatModel
        query = sqlalchemy.select(model.trial_id, model.heartbeat, sqlalchemy.func.now()).where(
            model.trial_id.in_(list(by_id))
        )
        with storage.engine.connect() as conn:
            rows = conn.execute(query).all()
        return {
            by_id[trial_id]: max(0.0, (now.replace(tzinfo=None) - beat).total_seconds())
            for trial_id, beat, now in rows
        }
    except Exception:  # noqa: BLE001 - informative only
        return {}


def retry_failed(study: optuna.Study) -> list[int]:
    """``run --retry-failed``: enqueue each failed trial's params once more, as Optuna's retry
    callback does for a stale trial, so the copy supersedes the failure in the budget (counted
    within ``study.n_trials``). Trials already retried and those closed as over budget are
    skipped. Returns the numbers of the failed trials enqueued again."""
    trials = study.get_trials(deepcopy=False)
    by_number = {t.number: t for t in trials}
    numbers = failed_not_retried(trials)
    # No cap on the chain here: the user asked for these retries by name.
    retry = retry_callback(len(trials) + 1)
    for number in numbers:
        retry(study, by_number[number])
    return numbers


def failed_not_retried(trials: list[optuna.trial.FrozenTrial]) -> list[int]:
    """The failed trials that no copy retries (what ``--retry-failed`` would enqueue)."""
    superseded: set[int] = set()
    for t in trials:
        superseded.update(retry_history(t))
    return [
        t.number
        for t in trials
        if t.state.name == "FAIL"
        and t.number not in superseded
        and not t.system_attrs.get(OVER_BUDGET_ATTR)
    ]


@dataclass(frozen=True)
class _Entry:
    trial_id: int
    state: str
    over_budget: bool


@dataclass(frozen=True)
class Budget:
    used: int  # trials that count towards study.n_trials
    waiting: int  # enqueued retries (counted already; run even when the budget is used up)
    foreign_running: int  # RUNNING trials of other workers (or of a dead one, not stale yet)


class Ledger:
    """The study's trials as far as the budget is concerned, read incrementally.

    Counted: every trial except FAILs that a retry superseded (the copy counts instead) and
    trials closed as over budget. Trial numbers are dense (0, 1, ...), so new trials are found
    by asking for the next number until the storage has none.
    """

    def __init__(self, study: optuna.Study, storage: Any, study_id: int) -> None:
        self._study = study
        self._storage = storage
        self._study_id = study_id
        self._entries: dict[int, _Entry] = {}
        self._unfinished: set[int] = set()
        self._failed: set[int] = set()
        self._over_budget: set[int] = set()
        self._superseded_by: dict[int, int] = {}  # FAIL number -> first copy that retries it

    def refresh(self) -> None:
        for number in sorted(self._unfinished):
            self._read(number, self._entries[number].trial_id)
        number = len(self._entries)
        while True:
            try:
                trial_id = self._storage.get_trial_id_from_study_id_trial_number(
                    self._study_id, number
                )
            except KeyError:
                return
            self._read(number, trial_id)
            number += 1

    def _read(self, number: int, trial_id: int) -> None:
        trial = self._storage.get_trial(trial_id)
        state = trial.state.name
        entry = _Entry(trial_id, state, bool(trial.system_attrs.get(OVER_BUDGET_ATTR)))
        if number not in self._entries:
            # A copy's history is written when it is enqueued and never changes.
            for earlier in retry_history(trial):
                self._superseded_by.setdefault(earlier, number)
        self._entries[number] = entry
        if state in ("WAITING", "RUNNING"):
            self._unfinished.add(number)
        else:
            self._unfinished.discard(number)
        if state == "FAIL":
            self._failed.add(number)
        if entry.over_budget:
            self._over_budget.add(number)

    def used(self, below: int | None = None) -> int:
        """Trials that count, among those numbered below ``below`` (all by default); a FAIL
        counts as superseded only by a copy numbered below ``below`` too."""
        limit = len(self._entries) if below is None else min(below, len(self._entries))
        gone = uncounted(self._failed, self._over_budget, self._superseded_by, below=limit)
        return limit - len(gone)

    def budget(self, is_ours: Callable[[int], bool]) -> Budget:
        waiting = foreign = 0
        for number in self._unfinished:
            state = self._entries[number].state
            if state == "WAITING":
                waiting += 1
            elif state == "RUNNING" and not is_ours(number):
                foreign += 1
        return Budget(self.used(), waiting, foreign)


def counted_numbers(trials: list[optuna.trial.FrozenTrial]) -> set[int]:
    """The numbers of the trials that count towards ``study.n_trials`` (for summaries), by
    the rule of :mod:`dvt_hpo.budget`."""
    gone = uncounted_attempts(
        Attempt(
            t.number,
            t.state.name,
            bool(t.system_attrs.get(OVER_BUDGET_ATTR)),
            tuple(retry_history(t)),
        )
        for t in trials
    )
    return {t.number for t in trials if t.number not in gone}


__all__ = [
    "HEARTBEAT_ATTR",
    "OVER_BUDGET_ATTR",
    "Budget",
    "Ledger",
    "counted_numbers",
    "fail_attempt",
    "failed_not_retried",
    "heartbeat_ages",
    "reconcile",
    "record_heartbeat",
    "retried_trial_number",
    "retry_failed",
    "retry_history",
]
