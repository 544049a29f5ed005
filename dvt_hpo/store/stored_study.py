"""What a study database already holds about a study, read without writing anything.

``validate`` compares a study file with the stored study, and must neither create a database
nor touch one: a missing SQLite or journal file means "no study yet" (and a SQLite file is
opened with ``mode=rw``, which never creates it); a PostgreSQL database is read in read-only
transactions; and Optuna's ``RDBStorage`` is opened only when its tables exist (it would create
them, and stamp its version tables, otherwise), so it only reads.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dvt_hpo.exceptions import DvtHpoError
from dvt_hpo.optuna_api.private import storage_of, study_id_of
from dvt_hpo.store.errors import storage_error
from dvt_hpo.store.lock import lock_connect_args
from dvt_hpo.store.queries import count_trials
from dvt_hpo.studyfile.urls import journal_path, sqlite_path, storage_kind

__all__ = ["StoredStudy", "read_stored_study"]

# Optuna's RDBStorage writes into these when they are missing or empty.
_OPTUNA_TABLES = frozenset({"studies", "study_directions", "version_info", "alembic_version"})


@dataclass(frozen=True)
class StoredStudy:
    """A stored study as the compatibility check needs it."""

    name: str
    direction: str  # "minimize" | "maximize" (the first objective's)
    user_attrs: Mapping[str, Any]
    n_trials: int
    directions: tuple[str, ...] = ()  # every objective's; () when not read
    system_attrs: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_study(cls, study: Any) -> StoredStudy:
        """From an open ``optuna.Study`` (what the study loop holds)."""
        directions = tuple(d.name.lower() for d in study.directions)
        return cls(
            name=study.study_name,
            direction=directions[0],
            user_attrs=dict(study.user_attrs),
            n_trials=count_trials(storage_of(study), study_id_of(study)),
            directions=directions,
            # Study.system_attrs is deprecated; the storage's is not.
            system_attrs=dict(storage_of(study).get_study_system_attrs(study_id_of(study))),
        )


def read_stored_study(
    url: str, name: str, *, source: str | Path | None = None
) -> StoredStudy | None:
    """The study ``name`` at ``url``, or ``None`` when there is none (nothing is created).

    Raises :class:`~dvt_hpo.store.errors.StorageError` (one line naming ``study.storage``,
    password redacted, what to check) when the database cannot be read.
    """
    kind = storage_kind(url)
    try:
        storage = _journal(url) if kind == "journal" else _rdb(url, kind)
        if storage is None:
            return None
        try:
            return _read(storage, name)
        finally:
            engine = getattr(storage, "engine", None)
            if engine is not None:
                # Closing the last connection is what removes a WAL database's -wal and -shm.
                engine.dispose()
    except DvtHpoError:
        raise
    except Exception as exc:  # noqa: BLE001 - any driver or schema error is one line here
        raise storage_error(exc, url, source=source) from None


def _read(storage: Any, name: str) -> StoredStudy | None:
    try:
        study_id = storage.get_study_id_from_name(name)
    except KeyError:
        return None
    directions = tuple(d.name.lower() for d in storage.get_study_directions(study_id))
    return StoredStudy(
        name=name,
        direction=directions[0],
        user_attrs=dict(storage.get_study_user_attrs(study_id)),
        n_trials=count_trials(storage, study_id),
        directions=directions,
        system_attrs=dict(storage.get_study_system_attrs(study_id)),
    )


def _journal(url: str) -> Any:
    path = journal_path(url)
    if path is None or not path.is_file():
        return None
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    # Reading a journal takes no lock; the backend's open("ab") of an existing file writes
    # nothing.
    return JournalStorage(JournalFileBackend(str(path)))


def _rdb(url: str, kind: str) -> Any:
    import optuna
    import sqlalchemy

    engine_kwargs: dict[str, Any] = {}
    if kind == "sqlite":
        path = sqlite_path(url)
        if path is None or not path.is_file():
            return None
        engine_kwargs["creator"] = lambda: _sqlite_existing(path)
    elif kind == "postgresql":
        # libpq options of the URL (e.g. a search_path) are kept: connect_args would replace them.
        given = sqlalchemy.engine.make_url(url).query.get("options", "")
        given = " ".join(given) if isinstance(given, tuple) else given
        engine_kwargs["connect_args"] = {
            **lock_connect_args(url),
            "options": f"{given} -c default_transaction_read_only=on".strip(),
        }
    engine = sqlalchemy.create_engine(url, **engine_kwargs)
    try:
        tables = set(sqlalchemy.inspect(engine).get_table_names())
    finally:
        engine.dispose()
    if not tables >= _OPTUNA_TABLES:
        return None
    return optuna.storages.RDBStorage(
        url, engine_kwargs=engine_kwargs, skip_table_creation=True, skip_compatibility_check=True
    )


def _sqlite_existing(path: Path) -> sqlite3.Connection:
    """A connection that never creates the file (``mode=rw``). Not ``mode=ro`` nor
    ``query_only``: either leaves the ``-wal``/``-shm`` files of a WAL database behind, where a
    plain connection that only reads removes them on close and changes nothing."""
    return sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=30, check_same_thread=False)
