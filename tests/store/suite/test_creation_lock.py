"""The creation lock on PostgreSQL is held only to create: a worker that finds the study
created loads it without waiting in line, and one that waits stops waiting once the study is
there."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import optuna
import pytest
import sqlalchemy
from sqlalchemy.pool import NullPool

from dvt_hpo.store.lock import ADVISORY_KEY
from dvt_hpo.store.opening import CREATED_ATTR, StudyAt
from tests.store.suite.conftest import _create_database, _drop_database


@pytest.fixture
def database(postgres_url: str) -> Iterator[str]:
    url = _create_database(postgres_url)
    yield url
    _drop_database(url)


class HeldLock:
    """The creation lock, taken by "another worker" (an open transaction of this test)."""

    def __init__(self, url: str) -> None:
        self.engine = sqlalchemy.create_engine(url, poolclass=NullPool)
        self.conn = self.engine.connect()
        got = self.conn.execute(
            sqlalchemy.text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": ADVISORY_KEY}
        ).scalar()
        assert got

    def release(self) -> None:
        self.conn.rollback()
        self.conn.close()
        self.engine.dispose()


@pytest.mark.processes
def test_a_created_study_is_loaded_without_waiting_for_the_lock(database: str) -> None:
    created = StudyAt(database, "s").create_or_load(["maximize"]).study
    assert created._storage.get_study_system_attrs(created._study_id)[CREATED_ATTR] is True
    lock = HeldLock(database)
    try:
        seen: list[int] = []
        start = time.monotonic()
        loaded = (
            StudyAt(database, "s")
            .create_or_load(["minimize"], init=lambda s: seen.append(len(s.trials)))
            .study
        )
        # Without the fast path it would wait for the lock (up to LOCK_TIMEOUT_S).
        assert time.monotonic() - start < 30
        assert loaded.direction == optuna.study.StudyDirection.MAXIMIZE and seen == [0]
    finally:
        lock.release()


@pytest.mark.processes
def test_a_waiting_worker_loads_the_study_once_another_created_it(database: str) -> None:
    lock = HeldLock(database)
    result: list[optuna.Study] = []
    waiter = threading.Thread(
        target=lambda: result.append(StudyAt(database, "s").create_or_load(["maximize"]).study)
    )
    try:
        waiter.start()
        waiter.join(1.0)  # it polls the lock: still waiting a second later
        assert waiter.is_alive() and not result
        # "The other worker" creates the study (its marker last) but keeps the lock.
        study = optuna.create_study(storage=database, study_name="s", direction="maximize")
        study._storage.set_study_system_attr(study._study_id, CREATED_ATTR, True)
        waiter.join(30)
        assert not waiter.is_alive() and result[0].study_name == "s"
    finally:
        lock.release()
        waiter.join(30)
