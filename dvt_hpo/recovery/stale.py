"""Which RUNNING trials belong to a dead worker: the stale rule, on every storage.

A live worker records each of its running trials' heartbeat every
``study.heartbeat_interval_s``; a trial whose last heartbeat is older than
``study.grace_period_s`` is stale, as in Optuna's own rule (RDB storages: the heartbeat table
and the database's clock; journal files, which have no heartbeat in Optuna: a trial system
attr and the workers' clocks).

A trial with no heartbeat at all is stale too once it started longer ago than the grace period:
its start time stands in for the heartbeat. A worker killed between ``study.ask`` and its first
heartbeat leaves exactly that (so does an ``ask`` retried after an outage whose INSERT had
landed), and Optuna's ``_get_stale_trial_ids`` skips such a trial forever: every worker then
waited on it for good. Optuna writes ``datetime_start`` with the asking worker's local clock,
so it is compared with this worker's local clock: workers on machines whose clocks disagree by
more than the grace period could fail such a trial early (keep the clocks in sync, as a cluster
does).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dvt_hpo.optuna_api.private import heartbeat_model, trial_id_of
from dvt_hpo.store.storage import supports_heartbeat

if TYPE_CHECKING:
    import optuna

HEARTBEAT_ATTR = "dvt_hpo:heartbeat"  # journal storages: the trial's last heartbeat (time.time)


def heartbeat_ages(storage: Any, trials: list[optuna.trial.FrozenTrial]) -> dict[int, float]:
    """Seconds since each trial's last heartbeat, by trial number (the database's clock for
    RDB storages, as Optuna's stale rule); trials without one are left out. Storage errors
    propagate: a trial is never judged on a heartbeat that could not be read."""
    if not trials:
        return {}
    if not supports_heartbeat(storage):
        now = time.time()
        return {
            t.number: max(0.0, now - float(t.system_attrs[HEARTBEAT_ATTR]))
            for t in trials
            if t.system_attrs.get(HEARTBEAT_ATTR) is not None
        }
    import sqlalchemy

    by_id = {trial_id_of(t): t.number for t in trials}
    model = heartbeat_model()
    query = sqlalchemy.select(model.trial_id, model.heartbeat, sqlalchemy.func.now()).where(
        model.trial_id.in_(list(by_id))
    )
    with storage.engine.connect() as conn:
        rows = conn.execute(query).all()
    return {
        by_id[trial_id]: max(0.0, (now.replace(tzinfo=None) - beat).total_seconds())
        for trial_id, beat, now in rows
    }


def stale_trials(
    study: optuna.Study, storage: Any, *, grace_period_s: float
) -> list[optuna.trial.FrozenTrial]:
    """The RUNNING trials whose heartbeat (or, without one, whose start) is older than
    ``grace_period_s``."""
    from optuna.trial import TrialState

    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    if not running:
        return []
    ages = heartbeat_ages(storage, running)
    now = datetime.now()  # Optuna's datetime_start: the asking worker's local time
    found = []
    for t in running:
        age = ages.get(t.number)
        if age is None and t.datetime_start is not None:
            age = (now - t.datetime_start).total_seconds()
        if age is not None and age > grace_period_s:
            found.append(t)
    return found


__all__ = ["HEARTBEAT_ATTR", "heartbeat_ages", "stale_trials"]
