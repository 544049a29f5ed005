"""dvt_hpo.store.opening: the one way to open a study, in its three modes. Reading a stored
study writes nothing (missing databases stay missing, files unchanged); loading one never
creates anything; creating or loading keeps the stored directions and runs init."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import optuna
import pytest

from dvt_hpo.exceptions import DvtHpoError, SpecError, StudyNotFoundError
from dvt_hpo.store.opening import StoredStudy, StudyAt

optuna.logging.set_verbosity(optuna.logging.WARNING)


def snapshot(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}


def make_study(url: str, name: str) -> None:
    opened = StudyAt(url, name).create_or_load(["maximize"])
    study, storage = opened.study, opened.storage
    study.set_user_attr("dvt_hpo:objective", {"metric": "score"})
    study.enqueue_trial({"x": 0.5})
    engine = getattr(storage, "engine", None)
    if engine is not None:
        engine.dispose()


@pytest.mark.parametrize("scheme", ["sqlite", "journal"])
def test_missing_file_is_no_study_and_is_not_created(tmp_path: Path, scheme: str) -> None:
    url = f"{scheme}:///{tmp_path}/sub/never.db"
    assert StudyAt(url, "s").read() is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("scheme", ["sqlite", "journal"])
def test_existing_study_is_read_and_nothing_changes(tmp_path: Path, scheme: str) -> None:
    url = f"{scheme}:///{tmp_path}/study.db"
    make_study(url, "s")
    before = snapshot(tmp_path)

    stored = StudyAt(url, "s").read()
    other = StudyAt(url, "other").read()

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
    assert StudyAt(f"sqlite:///{path}", "s").read() is None
    assert snapshot(tmp_path) == before


def test_postgres_study_is_read(postgres_url: str, unique_name: str) -> None:
    assert StudyAt(postgres_url, unique_name).read() is None
    make_study(postgres_url, unique_name)
    stored = StudyAt(postgres_url, unique_name).read()
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
        assert StudyAt(url, "s").read() is None
        with engine.connect() as conn:
            tables = sqlalchemy.inspect(conn).get_table_names(schema=schema)
        assert tables == []
    finally:
        with engine.begin() as conn:
            conn.execute(sqlalchemy.text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
        engine.dispose()


def test_unreachable_server_is_one_line_without_the_password() -> None:
    with pytest.raises(DvtHpoError) as info:
        StudyAt("postgresql://u:secret@127.0.0.1:1/db", "s").read()
    message = str(info.value)
    assert "\n" not in message and "secret" not in message and "***" in message, message


def test_postgres_reads_are_read_only_transactions(postgres_url: str, unique_name: str) -> None:
    from dvt_hpo.store.opening import _read_rdb

    make_study(postgres_url, unique_name)
    storage = _read_rdb(postgres_url, "postgresql")
    try:
        with pytest.raises(optuna.exceptions.StorageInternalError) as info:
            storage.set_study_user_attr(storage.get_study_id_from_name(unique_name), "k", 1)
        assert "read-only transaction" in str(info.value.__cause__)
    finally:
        storage.engine.dispose()


# -- load: never creating anything ------------------------------------------------------------------------
@pytest.mark.parametrize("scheme", ["sqlite", "journal"])
def test_load_never_creates_a_file(tmp_path: Path, scheme: str) -> None:
    url = f"{scheme}:///{tmp_path}/missing/study.db"
    with pytest.raises(StudyNotFoundError, match="does not exist; run `dvt-hpo run`"):
        StudyAt(url, "s").load()
    assert list(tmp_path.iterdir()) == []


def test_load_on_an_empty_sqlite_file_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    before = path.read_bytes()
    with pytest.raises(StudyNotFoundError, match="no Optuna study tables"):
        StudyAt(f"sqlite:///{path}", "s").load()
    assert path.read_bytes() == before


@pytest.mark.parametrize("scheme", ["sqlite", "journal"])
def test_load_names_the_studies_it_found(tmp_path: Path, scheme: str) -> None:
    url = f"{scheme}:///{tmp_path}/study.db"
    StudyAt(url, "alpha").create_or_load(["maximize"])
    with pytest.raises(StudyNotFoundError, match=r"no study named 'beta'.*it holds 'alpha'"):
        StudyAt(url, "beta").load()
    assert StudyAt(url, "alpha").load().study.direction.name == "MAXIMIZE"


def test_load_on_postgres_without_the_study(postgres_url: str, unique_name: str) -> None:
    with pytest.raises(StudyNotFoundError, match=unique_name):
        StudyAt(postgres_url, unique_name).load()


# -- create or load -----------------------------------------------------------------------------
def test_create_or_load_keeps_the_stored_directions_and_runs_init_once_per_open(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    seen: list[int] = []
    first = StudyAt(url, "s").create_or_load(
        ["maximize"], init=lambda s: seen.append(len(s.trials))
    )
    first.study.tell(first.study.ask(), 1.0)
    again = StudyAt(url, "s").create_or_load(
        ["minimize"], init=lambda s: seen.append(len(s.trials))
    )
    assert again.study.direction.name == "MAXIMIZE"  # the caller compares and reports
    assert seen == [0, 1]


def test_init_errors_propagate_unchanged(tmp_path: Path) -> None:
    def init(study: optuna.Study) -> None:
        raise SpecError("space differs", field="search_space")

    with pytest.raises(SpecError, match="space differs"):
        StudyAt(f"sqlite:///{tmp_path}/s.db", "s").create_or_load(["maximize"], init=init)


def test_both_opening_modes_give_the_uncached_storage_and_the_id(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    created = StudyAt(url, "s", source="s.yaml").create_or_load(["maximize"])
    loaded = StudyAt(url, "s").load()
    for opened in (created, loaded):
        assert opened.study_id == opened.storage.get_study_id_from_name("s")
        assert type(opened.storage).__name__ == "RDBStorage"  # not Optuna's _CachedStorage
    assert StudyAt(url, "s").read() == StoredStudy("s", "maximize", {}, 0, ("maximize",))
