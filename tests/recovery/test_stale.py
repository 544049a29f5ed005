"""The stale rule (dvt_hpo.recovery.stale) on a real SQLite storage with heartbeats."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import optuna
import pytest
import sqlalchemy

from dvt_hpo.recovery import stale

pytestmark = [
    pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning"),
    pytest.mark.filterwarnings("ignore:Heartbeat of storage"),
]


def _study(tmp_path: Path) -> tuple[optuna.Study, optuna.storages.RDBStorage]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(
        f"sqlite:///{tmp_path / 'study.db'}", heartbeat_interval=1, grace_period=2
    )
    return optuna.create_study(storage=storage, study_name="s"), storage


def started_ago(storage: optuna.storages.RDBStorage, trial_id: int, ago_s: float) -> None:
    """Back-date the trial's start by ``ago_s`` (the asking worker's clock, as Optuna's)."""
    from optuna.storages._rdb import models

    with storage.engine.begin() as conn:
        conn.execute(
            sqlalchemy.update(models.TrialModel)
            .where(models.TrialModel.trial_id == trial_id)
            .values(datetime_start=datetime.now() - timedelta(seconds=ago_s))
        )


def beat_ago(storage: optuna.storages.RDBStorage, trial_id: int, ago_s: float) -> None:
    """Record the trial's heartbeat as if ``ago_s`` ago."""
    from optuna.storages._rdb import models

    storage.record_heartbeat(trial_id)
    model = models.TrialHeartbeatModel
    with storage.engine.begin() as conn:
        # The database's clock (UTC in SQLite), as the heartbeat was written.
        beat = conn.execute(sqlalchemy.select(model.heartbeat).where(model.trial_id == trial_id))
        conn.execute(
            sqlalchemy.update(model)
            .where(model.trial_id == trial_id)
            .values(heartbeat=beat.scalar_one() - timedelta(seconds=ago_s))
        )


def test_a_trial_without_a_heartbeat_is_stale_once_its_start_is_older_than_the_grace(
    tmp_path: Path,
) -> None:
    study, storage = _study(tmp_path)
    old, young = study.ask(), study.ask()
    started_ago(storage, old._trial_id, 10)
    started_ago(storage, young._trial_id, 0.5)
    found = stale.stale_trials(study, storage, grace_period_s=2)
    assert [t.number for t in found] == [old.number]


def test_a_heartbeat_decides_whatever_the_start_time(tmp_path: Path) -> None:
    study, storage = _study(tmp_path)
    alive, dead = study.ask(), study.ask()
    for trial in (alive, dead):
        started_ago(storage, trial._trial_id, 3600)  # long-running trials
    beat_ago(storage, alive._trial_id, 0)
    beat_ago(storage, dead._trial_id, 10)
    found = stale.stale_trials(study, storage, grace_period_s=2)
    assert [t.number for t in found] == [dead.number]
    assert set(stale.heartbeat_ages(storage, study.get_trials())) == {0, 1}
