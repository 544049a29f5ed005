from __future__ import annotations

import os
import socket
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest

from dvt_hpo.exceptions import SpecError, StorageError
from dvt_hpo.store.opening import OpenStudy, StudyAt
from dvt_hpo.store.storage import HeartbeatSettings, check_storage_driver, supports_heartbeat
from dvt_hpo.studyfile.urls import resolve_url, sqlite_path, storage_kind


def create(url: str, heartbeat: HeartbeatSettings | None = None) -> OpenStudy:
    """The study ``s`` created (or loaded) at ``url``: the storage opened as a run opens it."""
    return StudyAt(url, "s").create_or_load(["maximize"], heartbeat=heartbeat)


def test_resolve_url_makes_relative_paths_absolute(tmp_path: Path) -> None:
    assert resolve_url("sqlite:///a/b.db", tmp_path) == f"sqlite:///{tmp_path}/a/b.db"
    assert resolve_url("sqlite:////abs/b.db", tmp_path) == "sqlite:////abs/b.db"
    assert resolve_url("journal:///j.log", tmp_path) == f"journal:///{tmp_path}/j.log"
    assert resolve_url("postgresql://h/db", tmp_path) == "postgresql://h/db"
    assert sqlite_path(f"sqlite:///{tmp_path}/x.db") == tmp_path / "x.db"
    assert storage_kind("postgresql+psycopg2://h/db") == "postgresql"
    assert storage_kind("journal:///x") == "journal"


def test_sqlite_storage_uses_wal_and_heartbeats(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    heartbeat = HeartbeatSettings(interval_s=1, grace_period_s=2, max_retries=1)
    assert supports_heartbeat(create(url, heartbeat).storage)
    mode = sqlite3.connect(tmp_path / "s.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def _synchronous(storage: Any) -> int:
    """SQLite's synchronous setting on a connection of ``storage``'s pool (1 NORMAL, 2 FULL)."""
    with storage.engine.connect() as conn:
        return int(conn.exec_driver_sql("PRAGMA synchronous").scalar_one())


def test_wal_commits_sync_at_checkpoints_and_other_journal_modes_at_each_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dvt_hpo.store.storage as storage

    wal = create(f"sqlite:///{tmp_path}/wal.db")
    assert _synchronous(wal.storage) == 1  # every pooled connection, the first too
    loaded = StudyAt(f"sqlite:///{tmp_path}/wal.db", wal.study.study_name).load()
    assert _synchronous(loaded.storage) == 1
    monkeypatch.setattr(storage, "filesystem_type", lambda path: "nfs4")
    rollback = create(f"sqlite:///{tmp_path}/nfs.db")  # no WAL there: FULL, SQLite's default
    assert _synchronous(rollback.storage) == 2


def test_journal_storage_opens_without_heartbeat(tmp_path: Path) -> None:
    opened = create(f"journal:///{tmp_path}/j.log")
    assert not supports_heartbeat(opened.storage)
    study = opened.study
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    assert len(study.trials) == 2


def test_missing_driver_is_named() -> None:
    # pg8000 is a real SQLAlchemy dialect whose driver this project does not install.
    with pytest.raises(SpecError, match="pg8000") as info:
        check_storage_driver("postgresql+pg8000://u:pw@h/db", "s.yaml")
    assert "pw@" not in str(info.value)
    with pytest.raises(SpecError, match="not a URL SQLAlchemy can open"):
        check_storage_driver("nosuchdb://h/db", "s.yaml")
    check_storage_driver("sqlite:///x.db")


def test_postgres_storage_round_trip(postgres_url: str, unique_name: str) -> None:
    opened = StudyAt(postgres_url, unique_name).create_or_load(
        ["minimize"], heartbeat=HeartbeatSettings(1, 2, 1)
    )
    storage, study = opened.storage, opened.study
    assert supports_heartbeat(storage)
    try:
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
        assert len(optuna.load_study(study_name=unique_name, storage=storage).trials) == 2
    finally:
        optuna.delete_study(study_name=unique_name, storage=storage)


# -- one-line errors --------------------------------------------------------------------------
def _one_line_error(url: str, opener: Callable[[str], Any] = create) -> StorageError:
    with pytest.raises(StorageError) as info:
        opener(url)
    message = str(info.value)
    assert "\n" not in message
    assert "study.storage" in message
    return info.value


def test_sqlite_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("just some text, not a database\n" * 100)
    before = path.read_bytes()
    error = _one_line_error(f"sqlite:///{path}")
    assert "not an SQLite database" in str(error)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


def test_sqlite_in_an_unwritable_place(tmp_path: Path) -> None:
    # /proc refuses new files even to root, unlike a chmod-ed folder.
    error = _one_line_error("sqlite:////proc/dvt-hpo-study.db")
    assert "/proc/dvt-hpo-study.db" in str(error)


def _open_as_nobody(url: str) -> str | None:
    """The StorageError message (or None) of ``create(url)`` in a forked process that runs
    as the ``nobody`` user when the tests run as root (CI): root writes into any folder.

    Forked, not started through ``runuser`` (as the outage cluster's PostgreSQL is): the
    interpreter may live where nobody cannot read it (pyenv under /root). So the caller has
    imported everything the call needs, and the child only drops its user and calls it."""
    import json
    import pwd

    nobody = pwd.getpwnam("nobody")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(read)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(nobody.pw_gid)
                os.setuid(nobody.pw_uid)
            try:
                create(url)
                result: dict[str, Any] = {"error": None}
            except StorageError as exc:
                result = {"error": str(exc)}
            result["euid"] = os.geteuid()
            os.write(write, json.dumps(result).encode())
            code = 0
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            os.write(write, json.dumps({"crash": f"{type(exc).__name__}: {exc}"}).encode())
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        result = json.loads(pipe.read() or "{}")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and "crash" not in result, result
    assert result["euid"] != 0, "the check ran as root, which writes into read-only folders"
    return result["error"]


def test_sqlite_in_a_read_only_folder(tmp_path: Path) -> None:
    import shutil
    import tempfile

    # Everything create imports on both paths, imported before the fork (see above).
    create(f"sqlite:///{tmp_path}/warm-up.db")
    _one_line_error("sqlite:////proc/dvt-hpo-study.db")
    # Not tmp_path: pytest keeps it private to this user, and nobody must reach the folder.
    base = Path(tempfile.mkdtemp(prefix="dvt-hpo-ro-"))
    try:
        base.chmod(0o755)
        folder = base / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        error = _open_as_nobody(f"sqlite:///{folder}/s.db")
        assert error is not None, "the study database was created in a read-only folder"
        assert "\n" not in error and "study.storage" in error
        assert "writable" in error and f"{folder}/s.db" in error, error
        assert list(folder.iterdir()) == []
    finally:
        shutil.rmtree(base)


@pytest.mark.parametrize("scheme", ["sqlite", "journal"])
def test_storage_path_under_a_file(tmp_path: Path, scheme: str) -> None:
    (tmp_path / "file").write_text("x")
    error = _one_line_error(f"{scheme}:///{tmp_path}/file/sub/study.db")
    assert "is a file, not a folder" in str(error)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_journal_in_proc() -> None:
    error = _one_line_error("journal:////proc/dvt-hpo-study.log")
    assert "/proc" in str(error)


def test_unreachable_server_is_one_line_without_password() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    url = f"postgresql://alice:s3cret-pw@127.0.0.1:{port}/hpo"
    error = _one_line_error(url, create)
    assert "cannot connect to the database server (" in str(error)
    assert "Connection refused)" in str(error)
    assert "host and port" in str(error)
    assert "s3cret-pw" not in str(error)
    assert "alice:***@127.0.0.1" in str(error)


def test_wrong_database_name(postgres_url: str) -> None:
    import sqlalchemy

    url = (
        sqlalchemy.engine.make_url(postgres_url)
        .set(database="no_such_db_dvt")
        .render_as_string(False)
    )
    error = _one_line_error(url, create)
    assert "the database does not exist" in str(error)
    assert "createdb" in str(error)


def test_unknown_host(tmp_path: Path) -> None:
    error = _one_line_error("postgresql://u:pw@no-such-host.invalid/db")
    assert "unknown host" in str(error)


def test_sqlite_on_a_network_file_system_keeps_the_rollback_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dvt_hpo.store.storage as storage

    assert storage.filesystem_type(tmp_path) is not None
    assert not storage.is_network_filesystem(tmp_path)
    monkeypatch.setattr(storage, "filesystem_type", lambda path: "nfs4")
    create(f"sqlite:///{tmp_path}/nfs.db")
    mode = sqlite3.connect(tmp_path / "nfs.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "delete"


def test_creation_races_are_retried_and_other_errors_are_not(tmp_path: Path) -> None:
    # The fallback for dialects without a creation lock (MySQL, ...), on real SQLAlchemy errors.
    import sqlalchemy

    from dvt_hpo.store.lock import is_creation_race, retry_creation_race

    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path}/r.db")
    with engine.begin() as conn:
        conn.execute(sqlalchemy.text("CREATE TABLE studies (x)"))
    calls = 0

    def create_twice() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            with engine.begin() as conn:
                conn.execute(sqlalchemy.text("CREATE TABLE studies (x)"))
        return "created"

    assert retry_creation_race(create_twice) == "created" and calls == 2

    def bad_sql() -> None:
        with engine.begin() as conn:
            conn.execute(sqlalchemy.text("SELEC 1"))

    with pytest.raises(sqlalchemy.exc.OperationalError) as info:
        retry_creation_race(bad_sql)
    assert not is_creation_race(info.value)
    engine.dispose()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mysql://u:pw@h/db", "or write mysql+pymysql://... and pip install 'dvt-hpo[mysql]'"),
        ("mysql+pymysql://u:pw@h/db", "pip install 'pymysql' (or pip install 'dvt-hpo[mysql]')"),
    ],
)
def test_a_missing_mysql_driver_names_the_mysql_extra(url: str, expected: str) -> None:
    import importlib.util

    from dvt_hpo.exceptions import SpecError
    from dvt_hpo.store.storage import check_storage_driver

    if importlib.util.find_spec("MySQLdb") or importlib.util.find_spec("pymysql"):
        pytest.skip("a MySQL driver is installed here")
    with pytest.raises(SpecError) as info:
        check_storage_driver(url)
    assert expected in str(info.value) and "postgres" not in str(info.value)
    assert "pw" not in str(info.value)


@pytest.mark.parametrize(
    ("revision", "expected"),
    [
        ("v3.0.0.a", "older than this Optuna .* `optuna storage upgrade --storage <url>`"),
        ("v99.0.0", "written by a newer Optuna than this one"),
    ],
)
def test_a_database_of_another_optuna_schema_is_refused(
    tmp_path: Path, revision: str, expected: str
) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    create(url)
    with sqlite3.connect(tmp_path / "o.db") as conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (revision,))
    with pytest.raises(StorageError, match=expected):
        create(url)
    with pytest.raises(StorageError, match=expected):
        StudyAt(url, "s").load()
