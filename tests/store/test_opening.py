"""Reading a stored study without writing: missing databases stay missing, files unchanged."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from dvt_hpo.exceptions import DvtHpoError
from dvt_hpo.store.storage import open_storage
from dvt_hpo.store.stored_study import StoredStudy, read_stored_study

optuna.logging.set_verbosity(optuna.logging.WARNING)


def snapshot(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}


def make_study(url: str, name: str) -> None:
    storage = open_storage(url)
    study = optuna.create_study(storage=storage, study_name=name, direction="maximize")
    study.set_user_attr("dvt_hpo:objective", {"metric": "score"})
    study.enqueue_trial({"x": 0.5})
    engine = getattr(storage, "engine", None)
    if engine is not None:
        engine.dispose()


@pytest.mark.parametrize("scheme", ["sqlite", "journal"])
def test_missing_file_is_no_study_and_is_not_created(tmp_path: Path, scheme: str) -> None:
    url = f"{scheme}:///{tmp_path}/sub/never.db"
    assert read_stored_study(url, "s") is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("scheme", ["sqlite", "journal"])
def test_existing_study_is_read_and_nothing_changes(tmp_path: Path, scheme: str) -> None:
    url = f"{scheme}:///{tmp_path}/study.db"
    make_study(url, "s")
    before = snapshot(tmp_path)

    stored = read_stored_study(url, "s")
    other = read_stored_study(url, "other")

    assert stored == StoredStudy(
        "s", "maximize", {"dvt_hpo:objective": {"metric": "score"}}, 1, directions=("maximize",)
    )
    assert other is None
    assert snapshot(tmp_path) == before


def test_sqlite_file_without_optuna_tables_is_no_study(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "other.db"
    sqlite3.connect(path).close()
    before = snapshot(tmp_path)
    assert read_stored_study(f"sqlite:///{path}", "s") is None
    assert snapshot(tmp_path) == before


def test_postgres_study_is_read(postgres_url: str, unique_name: str) -> None:
    assert read_stored_study(postgres_url, unique_name) is None
    make_study(postgres_url, unique_name)
    stored = read_stored_study(postgres_url, unique_name)
    assert stored is not None and stored.direction == "maximize" and stored.n_trials == 1


def test_database_without_optuna_tables_gets_none_created(postgres_url: str) -> None:
    import sqlalchemy

    schema = f"empty_{abs(hash(postgres_url)) % 10**6}"
    engine = sqlalchemy.create_engine(postgres_url)
    try:
        with engine.begin() as conn:
            conn.execute(sqlalchemy.text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
            conn.execute(sqlalchemy.text(f"CREATE SCHEMA {schema}"))
        url = f"{postgres_url}?options=-csearch_path%3D{schema}"
        assert read_stored_study(url, "s") is None
        with engine.connect() as conn:
            tables = sqlalchemy.inspect(conn).get_table_names(schema=schema)
        assert tables == []
    finally:
        with engine.begin() as conn:
            conn.execute(sqlalchemy.text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        engine.dispose()


def test_unreachable_server_is_one_line_without_the_password() -> None:
    with pytest.raises(DvtHpoError) as info:
        read_stored_study("postgresql://u:secret@127.0.0.1:1/db", "s")
    message = str(info.value)
    assert "\n" not in message and "secret" not in message and "***" in message, message


def test_postgres_reads_are_read_only_transactions(postgres_url: str, unique_name: str) -> None:
    from dvt_hpo.store.stored_study import _rdb

    make_study(postgres_url, unique_name)
    storage = _rdb(postgres_url, "postgresql")
    try:
        with pytest.raises(optuna.exceptions.StorageInternalError) as info:
            storage.set_study_user_attr(storage.get_study_id_from_name(unique_name), "k", 1)
        assert "read-only transaction" in str(info.value.__cause__)
    finally:
        storage.engine.dispose()
