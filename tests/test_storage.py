from __future__ import annotations

import sqlite3
from pathlib import Path

import optuna
import pytest

from dvt_hpo.exceptions import SpecError
from dvt_hpo.storage import (
    HeartbeatSettings,
    check_storage_driver,
    open_storage,
    redact_url,
    resolve_url,
    sqlite_path,
    storage_kind,
    supports_heartbeat,
)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://alice:s3cret@db:5432/hpo", "postgresql://alice:***@db:5432/hpo"),
        ("postgresql+psycopg2://bob:p%40ss@db/hpo", "postgresql+psycopg2://bob:***@db/hpo"),
        ("postgresql://carol@db/hpo", "postgresql://carol@db/hpo"),
        ("mysql://u:pw@h/db?charset=utf8", "mysql://u:***@h/db?charset=utf8"),
        ("postgresql://h/db?user=u&password=pw&x=1", "postgresql://h/db?user=u&password=***&x=1"),
        ("sqlite:///study.db", "sqlite:///study.db"),
    ],
)
def test_redact_url_hides_passwords(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert "s3cret" not in redact_url(url)


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
    storage = open_storage(url, HeartbeatSettings(interval_s=1, grace_period_s=2, max_retries=1))
    assert supports_heartbeat(storage)
    optuna.create_study(storage=storage, study_name="s")
    mode = sqlite3.connect(tmp_path / "s.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_journal_storage_opens_without_heartbeat(tmp_path: Path) -> None:
    storage = open_storage(f"journal:///{tmp_path}/j.log")
    assert not supports_heartbeat(storage)
    study = optuna.create_study(storage=storage, study_name="j")
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
    storage = open_storage(postgres_url, HeartbeatSettings(1, 2, 1))
    assert supports_heartbeat(storage)
    study = optuna.create_study(storage=storage, study_name=unique_name)
    try:
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
        assert len(optuna.load_study(study_name=unique_name, storage=storage).trials) == 2
    finally:
        optuna.delete_study(study_name=unique_name, storage=storage)
