"""Crash recovery and retries, shared by every worker through the storage.

A worker may be killed at any instant (docs/recovery.md goes through every step); what it
leaves is repaired by any live worker's sweep or by the next ``run``, exactly once:

- A failed attempt is retried by exactly one copy, whoever notices the failure first and
  whoever dies on the way. :func:`fail_attempt` first marks the attempt (system attr
  :data:`RETRY_ATTR`, its own number) while it is still RUNNING, then moves it to FAIL (the
  storage refuses to update a finished trial, atomically, so one worker's FAIL goes through),
  then :func:`enqueue_retries` enqueues the WAITING copy of every marked FAIL that has none,
  under the study's retry lock (:func:`dvt_hpo.store.lock.retry_lock`): whoever holds it
  sees the copies enqueued before, and a worker killed anywhere on the way leaves either a
  RUNNING trial (failed again as stale) or a marked FAIL (enqueued by the next sweep).
- :func:`reconcile` is that sweep: it fails the RUNNING trials of dead workers
  (:func:`dvt_hpo.recovery.stale.stale_trials`: heartbeat older than the grace period, or no heartbeat
  at all and started longer ago than that) and enqueues every copy still missing.
- The count of ``study.n_trials`` is :class:`dvt_hpo.budget.ledger.Ledger`'s: a marked FAIL
  still waiting for its copy counts (its copy will take its place), and is work left to do: a
  worker does not leave while there is one.

Retry chains are read through Optuna's public ``RetryHeartbeatStaleTrialCallback``
``retried_trial_number`` / ``retry_history``; copies are made by that callback too. Optuna's
``fail_stale_trials`` is not used: it skips RUNNING trials without a heartbeat row, and it
commits FAIL and calls the retry callback afterwards without leaving a mark, so a sweeper
killed in between left a FAIL nobody retried.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from dvt_hpo.budget.trials import (
    OVER_BUDGET_ATTR,
    PRIOR_ATTR,
    RETRY_ATTR,
    Attempt,
    uncounted_attempts,
    within_retries,
)
from dvt_hpo.optuna_api.private import trial_id_of
from dvt_hpo.recovery import kill_points, stale
from dvt_hpo.results.outcome import trial_state
from dvt_hpo.store.storage import (
    MACHINE_ATTR,
    MACHINE_RETRIES_ATTR,
    PAUSED_ATTR,
    PAUSES_ATTR,
    retry_callback,
    supports_heartbeat,
)

if TYPE_CHECKING:
    import optuna

# A context manager factory: the study's retry lock (dvt_hpo.store.lock.retry_lock).
Lock = Callable[[], contextlib.AbstractContextManager[Any]]

HEARTBEAT_ATTR = stale.HEARTBEAT_ATTR  # journal storages: the trial's last heartbeat
_log = logging.getLogger(__name__)


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
    study: optuna.Study,
    storage: Any,
    trial_id: int,
    *,
    retry: bool,
    max_retries: int,
    lock: Lock = contextlib.nullcontext,
    enqueue: bool = True,
) -> bool:
    """Record the attempt FAIL and, when ``retry``, have one WAITING copy of its params
    enqueued (at once when ``enqueue``, else by the caller's :func:`enqueue_retries`).

    False when the trial was already finished (another worker failed it as stale, and the
    copy is that worker's to enqueue): then nothing is written here.
    """
    import optuna

    try:
        if retry:
            number = storage.get_trial_number_from_id(trial_id)
            storage.set_trial_system_attr(trial_id, RETRY_ATTR, number)
            kill_points.reached("retry:marked")
        failed = storage.set_trial_state_values(trial_id, trial_state("FAIL"))
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    if failed and retry:
        kill_points.reached("retry:failed")
        if enqueue:
            try:
                enqueue_retries(study, max_retries=max_retries, lock=lock)
            except Exception:  # noqa: BLE001 - the mark keeps it for the next sweep
                _log.debug("enqueuing retries deferred to the next sweep", exc_info=True)
    return bool(failed)


def mark_machine_failure(storage: Any, trial_id: int, kind: str) -> None:
    """Mark a RUNNING attempt as failed of the machine (:mod:`dvt_hpo.recovery.node_health`),
    before :func:`fail_attempt`: its copy is then made whatever ``max_retries`` says, and
    counts the chain's machine failures (:func:`machine_retries`)."""
    storage.set_trial_system_attr(trial_id, MACHINE_ATTR, kind)


def machine_retries(trial: optuna.trial.FrozenTrial) -> int:
    """How many attempts before this one in its chain failed of the machine."""
    return int(trial.system_attrs.get(MACHINE_RETRIES_ATTR) or 0)


def pending_retries(
    trials: list[optuna.trial.FrozenTrial], max_retries: int
) -> list[optuna.trial.FrozenTrial]:
    """The attempts failed for a retry whose copy is not enqueued yet (within
    ``max_retries`` copies per original trial, machine failures aside: :func:`within_retries`)."""
    superseded = {n for t in trials for n in retry_history(t)}
    return [
        t
        for t in trials
        if t.state.name == "FAIL"
        and t.system_attrs.get(RETRY_ATTR) == t.number
        and t.number not in superseded
        and within_retries(
            copies=len(retry_history(t)),
            machine_copies=machine_retries(t),
            machine=bool(t.system_attrs.get(MACHINE_ATTR)),
            max_retries=max_retries,
            pauses=pauses_before(t),
        )
    ]


def pauses_before(trial: optuna.trial.FrozenTrial) -> int:
    """How many attempts before this one in its chain were paused, not failed
    (``trials.pause``): their continuations are not retries."""
    return int(trial.system_attrs.get(PAUSES_ATTR) or 0)


def is_paused(trial: optuna.trial.FrozenTrial) -> bool:
    """Whether ``trial`` was paused with its state kept for a continuation (``trials.pause``)."""
    return trial.state.name == "PRUNED" and trial.system_attrs.get(PAUSED_ATTR) == trial.number


def enqueue_retries(study: optuna.Study, *, max_retries: int, lock: Lock) -> list[int]:
    """Enqueue the copy of every attempt failed for a retry that has none, each exactly once
    whoever else does the same at the same instant; the numbers of the attempts enqueued."""
    if not pending_retries(study.get_trials(deepcopy=False), max_retries):
        return []
    with lock():
        kill_points.reached("retry:locked")
        # Read again under the lock: the copies enqueued by the previous holder are visible.
        pending = pending_retries(study.get_trials(deepcopy=False), max_retries)
        # pending_retries decided which get a copy (machine failures beyond max_retries too).
        retry = retry_callback(None)
        for trial in pending:
            retry(study, trial)
        if pending:
            kill_points.reached("retry:enqueued")
    return [t.number for t in pending]


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
    lock: Lock = contextlib.nullcontext,
    on_failed: Callable[[optuna.trial.FrozenTrial, bool], None] | None = None,
    finished: Callable[[optuna.Study, Any, optuna.trial.FrozenTrial], bool] | None = None,
    judge_stale: bool = True,
) -> None:
    """The sweep: fail the trials of dead workers (stale, or never given a heartbeat) for a
    retry, and enqueue every copy still missing (also those a killed worker left).
    ``on_failed(trial, retry)`` is called for each trial this sweep failed; ``finished(study,
    storage, trial)`` first records a stale trial whose result says it finished
    (:mod:`dvt_hpo.recovery.finished`; True: recorded, not failed). ``judge_stale=False``
    (the database was down within the grace period: live workers' heartbeats could not be
    written) fails nothing and only enqueues the copies still missing."""
    judged = stale.stale_trials(study, storage, grace_period_s=grace_period_s)
    for trial in judged if judge_stale else []:
        if is_ours(trial.number):
            continue
        # Closed as over budget but killed before the FAIL: closed, not retried.
        retry = not trial.system_attrs.get(OVER_BUDGET_ATTR)
        if retry and finished is not None and finished(study, storage, trial):
            continue
        failed = fail_attempt(
            study, storage, trial_id_of(trial), retry=retry, max_retries=max_retries, enqueue=False
        )
        if failed and on_failed is not None:
            on_failed(trial, retry)
    try:
        enqueue_retries(study, max_retries=max_retries, lock=lock)
    except TimeoutError:
        # Another worker holds the retry lock (and enqueues): the next sweep looks again.
        _log.debug("retry lock busy; enqueuing left to the next sweep", exc_info=True)


def heartbeat_ages(storage: Any, trials: list[optuna.trial.FrozenTrial]) -> dict[int, float]:
    """Seconds since each trial's last heartbeat, by trial number, as the stale rule sees them
    (the database's clock for RDB storages); trials without one are left out. Best effort:
    this only informs the "waiting for" line, so a storage it cannot read gives ``{}``."""
    try:
        return stale.heartbeat_ages(storage, trials)
    except Exception:  # noqa: BLE001 - informative only
        return {}


def retry_failed(study: optuna.Study, *, lock: Lock = contextlib.nullcontext) -> list[int]:
    """``run --retry-failed``: enqueue each failed trial's params once more, as Optuna's retry
    callback does for a stale trial, so the copy supersedes the failure in the budget (counted
    within ``study.n_trials``). Trials already retried and those closed as over budget are
    skipped. Returns the numbers of the failed trials enqueued again."""
    with lock():  # as enqueue_retries: a sweep at the same instant must not enqueue it too
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


def counted_numbers(trials: list[optuna.trial.FrozenTrial]) -> set[int]:
    """The numbers of the trials that count towards ``study.n_trials`` (for summaries), by
    the rule of :mod:`dvt_hpo.budget.trials`."""
    gone = uncounted_attempts(
        Attempt(
            t.number,
            t.state.name,
            bool(t.system_attrs.get(OVER_BUDGET_ATTR)),
            tuple(retry_history(t)),
            prior=bool(t.system_attrs.get(PRIOR_ATTR)),
            paused=is_paused(t),
        )
        for t in trials
    )
    return {t.number for t in trials if t.number not in gone}


__all__ = [
    "HEARTBEAT_ATTR",
    "counted_numbers",
    "enqueue_retries",
    "fail_attempt",
    "failed_not_retried",
    "heartbeat_ages",
    "is_paused",
    "machine_retries",
    "mark_machine_failure",
    "pauses_before",
    "pending_retries",
    "reconcile",
    "record_heartbeat",
    "retried_trial_number",
    "retry_failed",
    "retry_history",
]
