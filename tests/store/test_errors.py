from __future__ import annotations

import socket
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy

from dvt_hpo.exceptions import DvtHpoError
from dvt_hpo.store.errors import (
    OutageRetry,
    StorageError,
    is_connection_error,
    storage_error,
    with_retry,
)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _raised(fn: Callable[[], object]) -> BaseException:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return exc
    raise AssertionError("expected an exception")


@pytest.fixture(scope="module")
def refused() -> BaseException:
    """A real connection-refused error, as SQLAlchemy raises it."""
    engine = sqlalchemy.create_engine(f"postgresql://u:pw@127.0.0.1:{_closed_port()}/db")
    return _raised(lambda: engine.connect())


def test_connection_errors_are_recognised(refused: BaseException) -> None:
    assert isinstance(refused, sqlalchemy.exc.OperationalError)
    assert is_connection_error(refused)
    # Optuna wraps commit failures in StorageInternalError "from" the SQLAlchemy error.
    import optuna

    try:
        raise optuna.exceptions.StorageInternalError("commit failed") from refused
    except optuna.exceptions.StorageInternalError as wrapped:
        assert is_connection_error(wrapped)


def test_other_database_errors_are_not_connection_errors(tmp_path: Path, postgres_url: str) -> None:
    engine = sqlalchemy.create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            bad_sql = _raised(lambda: conn.execute(sqlalchemy.text("SELEC 1")))
    finally:
        engine.dispose()
    assert not is_connection_error(bad_sql)

    db = tmp_path / "locked.db"
    holder = sqlite3.connect(db)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    other = sqlite3.connect(db, timeout=0)
    locked = _raised(lambda: other.execute("SELECT * FROM t"))
    assert "locked" in str(locked)
    assert not is_connection_error(locked)  # SQLite's busy timeout is the wait for this
    holder.rollback()

    holder.execute("CREATE TABLE u (x UNIQUE)")
    holder.execute("INSERT INTO u VALUES (1)")
    assert not is_connection_error(_raised(lambda: holder.execute("INSERT INTO u VALUES (1)")))
    assert not is_connection_error(ValueError("connection refused"))


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_with_retry_backs_off_then_succeeds(refused: BaseException) -> None:
    fake = FakeTime()
    failures = iter([refused] * 8)
    seen: list[float] = []

    def call() -> str:
        exc = next(failures, None)
        if exc is not None:
            raise exc
        return "ok"

    result = with_retry(
        call,
        retry_s=60,
        what="tell",
        url="postgresql://u:pw@h/db",
        on_retry=lambda exc, waited: seen.append(waited),
        clock=fake.clock,
        sleep=fake.sleep,
    )
    assert result == "ok"
    assert fake.sleeps == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 4.0, 4.0]  # doubling, capped at 4 s
    assert len(seen) == 8


def test_with_retry_gives_up_with_one_line(refused: BaseException) -> None:
    fake = FakeTime()

    def call() -> None:
        raise refused

    with pytest.raises(StorageError) as info:
        with_retry(
            call,
            retry_s=10,
            what="report",
            url="postgresql://u:pw@h/db",
            clock=fake.clock,
            sleep=fake.sleep,
        )
    message = str(info.value)
    assert "\n" not in message and "pw" not in message.replace("***", "")
    assert message.startswith("study.storage 'postgresql://u:***@h/db': report failed")
    assert "unreachable for 10 s" in message and "storage_retry_s" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert sum(fake.sleeps) == pytest.approx(10)  # the last pause stops at the deadline


def test_with_retry_lets_other_errors_through_at_once() -> None:
    fake = FakeTime()
    calls = 0

    def call() -> None:
        nonlocal calls
        calls += 1
        raise KeyError("no such trial")

    with pytest.raises(KeyError):
        with_retry(call, retry_s=60, what="ask", url="sqlite:///x.db", clock=fake.clock)
    assert calls == 1 and fake.sleeps == []


def test_storage_error_is_a_dvt_hpo_error_with_the_source_file() -> None:
    error = storage_error(OSError(13, "Permission denied", "/data/x.db"), "sqlite:////data/x.db")
    assert isinstance(error, DvtHpoError)
    error = StorageError("boom", url="postgresql://u:pw@h/db", hint="check", source="s.yaml")
    assert str(error) == "s.yaml: study.storage 'postgresql://u:***@h/db': boom; check"


def test_a_call_tried_once_still_counts_the_outage_it_met(refused: BaseException) -> None:
    """A heartbeat thread's call is not retried, but the outage it met keeps the worker from
    judging other workers' heartbeats (which could not land either) until the grace has passed
    since the database answered again; another error is no outage."""
    lines: list[str] = []
    db = OutageRetry("postgresql://u:pw@h/db", 60, out=lines.append)

    def refuse() -> None:
        raise refused

    with pytest.raises(type(refused)):
        db.once(refuse)
    assert db.met_outage_within(20)
    assert len(lines) == 1 and "database unreachable" in lines[0] and "pw" not in lines[0]
    assert db.once(lambda: "beat") == "beat"
    assert lines[1].startswith("database reachable again after")
    assert db.met_outage_within(20) and not db.met_outage_within(0)

    other = OutageRetry("postgresql://u:pw@h/db", 60, out=lines.append)
    with pytest.raises(ZeroDivisionError):
        other.once(lambda: 1 / 0)
    assert not other.met_outage_within(20)
