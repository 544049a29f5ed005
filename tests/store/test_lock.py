"""The creation and retry locks: a folder's flock for SQLite and journal files, an advisory lock
of the real PostgreSQL server (skipped, with the reason, when none answers), and the bounded
retry of the "already exists" race for the dialects without a lock."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy
import sqlalchemy.exc

from dvt_hpo.store.lock import (
    ADVISORY_KEY,
    LockTimeout,
    creation_lock,
    folder_lock,
    is_creation_race,
    lock_connect_args,
    retry_creation_race,
    retry_lock,
)


def test_a_folder_lock_creates_its_folder_and_times_out_while_held(tmp_path: Path) -> None:
    folder = tmp_path / "not" / "yet"
    with folder_lock(folder):
        assert folder.is_dir()
        # A second open of the folder is a second holder, as another worker's would be.
        with (
            pytest.raises(TimeoutError, match=f"{folder} stayed locked for 0.05 s"),
            folder_lock(folder, timeout_s=0.05),
        ):
            pass
    with folder_lock(folder, timeout_s=0.05):  # released when the holder left
        pass


@pytest.mark.parametrize(
    "url",
    ["sqlite:///{tmp}/db/study.db", "journal:///{tmp}/db/study.log"],
    ids=["sqlite", "journal"],
)
def test_the_creation_lock_of_a_file_is_its_folders_flock(tmp_path: Path, url: str) -> None:
    with creation_lock(url.format(tmp=tmp_path)) as held:
        assert held is True
        with pytest.raises(TimeoutError), folder_lock(tmp_path / "db", timeout_s=0.05):
            pass
    with folder_lock(tmp_path / "db", timeout_s=0.05):
        pass


@pytest.mark.parametrize("url", ["sqlite:///:memory:", "mysql://u@h/db"])
def test_in_memory_and_other_dialects_take_no_lock(url: str) -> None:
    with creation_lock(url) as outer, creation_lock(url, timeout_s=0.05) as inner:
        assert (outer, inner) == (True, True)
    with retry_lock(url, 1), retry_lock(url, 1, timeout_s=0.05):
        pass


def test_the_retry_lock_of_a_file_waits_its_timeout_then_gives_up(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/study.db"
    with (
        folder_lock(tmp_path),
        pytest.raises(TimeoutError, match="stayed locked"),
        retry_lock(url, 7, timeout_s=0.05),
    ):
        pass
    with retry_lock(url, 7, timeout_s=0.05):
        pass


def _race(message: str) -> sqlalchemy.exc.IntegrityError:
    return sqlalchemy.exc.IntegrityError("INSERT INTO studies ...", {}, Exception(message))


def test_a_creation_race_is_recognised_by_its_type_and_words_through_the_chain() -> None:
    assert is_creation_race(_race('duplicate key value violates "studies_study_name_key"'))
    assert is_creation_race(
        sqlalchemy.exc.OperationalError(
            "CREATE TABLE", {}, Exception("table studies already exists")
        )
    )
    try:
        try:
            raise _race("UNIQUE constraint failed: studies.study_name")
        except sqlalchemy.exc.IntegrityError as exc:
            raise RuntimeError("creating the study failed") from exc
    except RuntimeError as wrapped:
        assert is_creation_race(wrapped)
    assert not is_creation_race(ValueError("already exists"))  # not a driver error
    assert not is_creation_race(
        sqlalchemy.exc.OperationalError("SELECT", {}, Exception("database is locked"))
    )


def test_a_creation_race_is_retried_a_bounded_number_of_times() -> None:
    calls: list[int] = []

    def twice_raced() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise _race("already exists")
        return "study"

    assert retry_creation_race(twice_raced) == "study" and len(calls) == 3

    calls.clear()

    def always_raced() -> str:
        calls.append(1)
        raise _race("already exists")

    with pytest.raises(sqlalchemy.exc.IntegrityError):
        retry_creation_race(always_raced, tries=4)
    assert len(calls) == 4

    calls.clear()

    def broken() -> str:
        calls.append(1)
        raise _race("permission denied for table studies")

    with pytest.raises(sqlalchemy.exc.IntegrityError):
        retry_creation_race(broken)
    assert len(calls) == 1  # any other error propagates at once


def test_postgres_connections_get_a_timeout_and_no_prepared_statements_with_psycopg3() -> None:
    assert lock_connect_args("postgresql+psycopg://u@h/db") == {
        "connect_timeout": 10,
        "prepare_threshold": None,
    }
    assert lock_connect_args("postgresql+psycopg2://u@h/db") == {"connect_timeout": 10}


# -- PostgreSQL: advisory locks of the real server ---------------------------------------------


@pytest.fixture
def holder(postgres_url: str) -> Iterator[sqlalchemy.Connection]:
    """A connection of another worker, in a transaction, to take advisory locks on."""
    engine = sqlalchemy.create_engine(postgres_url, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as conn:
            yield conn
            conn.rollback()
    finally:
        engine.dispose()


def _take(conn: sqlalchemy.Connection, key: int) -> None:
    got = conn.execute(sqlalchemy.text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": key})
    assert got.scalar() is True


@pytest.mark.processes
def test_the_retry_lock_of_a_postgres_study_is_one_holder_at_a_time(postgres_url: str) -> None:
    study_id = uuid.uuid4().int % 2**31  # a study no other test locks
    with retry_lock(postgres_url, study_id):
        with (
            pytest.raises(LockTimeout, match="stayed taken for 0.3 s"),
            retry_lock(postgres_url, study_id, timeout_s=0.3),
        ):
            pass
        with retry_lock(postgres_url, study_id + 1, timeout_s=0.3):  # another study's: free
            pass
    with retry_lock(postgres_url, study_id, timeout_s=0.3):  # released with its transaction
        pass


@pytest.mark.processes
def test_a_postgres_waiter_stops_waiting_once_the_study_is_ready(
    postgres_url: str, holder: sqlalchemy.Connection
) -> None:
    _take(holder, ADVISORY_KEY)  # another worker is creating
    asked: list[bool] = []

    def ready(conn: sqlalchemy.Connection) -> bool:
        asked.append(conn.execute(sqlalchemy.text("SELECT 1")).scalar() == 1)
        return len(asked) >= 2  # created while this worker waited

    with creation_lock(postgres_url, timeout_s=30, ready=ready) as held:
        assert held is False  # nothing left to create: load without the lock
    assert asked == [True, True]
    with (
        pytest.raises(LockTimeout),
        creation_lock(postgres_url, timeout_s=0.2, ready=lambda conn: False),
    ):
        pass
