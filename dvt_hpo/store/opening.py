"""The one way to open a study: :class:`StudyAt`, with one method per mode.

- :meth:`StudyAt.create_or_load` (``dvt-hpo run``, ``submit``): create the study, or load it if
  it exists, safely when many workers (processes, machines) do so at the same instant on a
  fresh database: the schema creation, the study creation and ``init(study)`` (storing the
  study file's settings, which races too) run under the database's creation lock
  (:mod:`dvt_hpo.store.lock`); a PostgreSQL study whose creation completed is marked
  (``CREATED_ATTR``), so later workers load it without the lock.
- :meth:`StudyAt.load` (``status``, ``best``, ``report``, ``dashboard``, ``cancel``,
  ``study.warm_start``): the existing study, never creating anything. Optuna creates a SQLite
  file or a journal on first open, tables in an empty database, and a study only through
  ``create_study``: each is checked before opening, so a study that has not run yet is one
  :class:`~dvt_hpo.exceptions.StudyNotFoundError` line (exit 1), and nothing is written.
- :meth:`StudyAt.read` (``validate``, and ``run`` before it writes): what the database holds
  about the study (a :class:`StoredStudy`), without Optuna writing anything: a missing SQLite or
  journal file means "no study yet" (and a SQLite file is opened with ``mode=rw``, which never
  creates it); a PostgreSQL database is read in read-only transactions; and Optuna's
  ``RDBStorage`` is opened only when its tables exist (it would create them, and stamp its
  version tables, otherwise). ``None`` when there is no such study.

The first two return an :class:`OpenStudy`: the study, its storage without Optuna's per-study
trial cache (which loads every trial on first use) for our own reads and heartbeats, and its id.
Failures to reach or open the database are one :class:`~dvt_hpo.store.errors.StorageError`
line; errors raised by ``init`` (e.g. a :class:`~dvt_hpo.exceptions.SpecError`) propagate.
"""

from __future__ import annotations

import contextlib
import gc
import random
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dvt_hpo.exceptions import DvtHpoError, StudyNotFoundError
from dvt_hpo.optuna_api.private import storage_of, study_id_of
from dvt_hpo.store.errors import storage_error
from dvt_hpo.store.lock import creation_lock, lock_connect_args, retry_creation_race
from dvt_hpo.store.queries import add_indexes, count_trials
from dvt_hpo.store.storage import (
    HeartbeatSettings,
    engine_kwargs,
    journal_storage,
    make_storage,
    quiet_experimental,
    rdb_storage,
    study_storage,
)
from dvt_hpo.studyfile.urls import journal_path, sqlite_path, storage_kind

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec.model import StudySpec

__all__ = ["CREATED_ATTR", "OpenStudy", "StoredStudy", "StudyAt", "is_server_full"]


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


@dataclass(frozen=True)
class OpenStudy:
    """An opened study, its storage without Optuna's trial cache, and its id."""

    study: optuna.Study
    storage: optuna.storages.BaseStorage
    study_id: int

    @classmethod
    def of(cls, study: optuna.Study) -> OpenStudy:
        return cls(study, study_storage(study), study_id_of(study))


@dataclass(frozen=True)
class StudyAt:
    """The study ``name`` in the database at ``url``; ``source`` (the study file) is named in
    error lines."""

    url: str
    name: str
    source: str | Path | None = None

    @classmethod
    def of(cls, spec: StudySpec) -> StudyAt:
        """The study a study file names."""
        return cls(spec.study.storage, spec.study.name, spec.path)

    def create_or_load(
        self,
        directions: Sequence[str],
        *,
        heartbeat: HeartbeatSettings | None = None,
        init: Callable[[optuna.Study], None] | None = None,
    ) -> OpenStudy:
        """Create the study with ``directions``, or load it; ``init(study)`` runs on it under the
        creation lock (unlocked on a PostgreSQL study whose creation completed). A stored study keeps its directions: compare
        ``study.directions`` with yours afterwards. With ``heartbeat``, RDB storages record
        trial heartbeats and fail trials whose heartbeat went stale (their orchestrator died),
        re-enqueueing their params through Optuna's retry callback; journal storages have none
        (the runner reconciles them itself)."""
        study = _create_or_load(self.url, self.name, directions, heartbeat, init, self.source)
        return OpenStudy.of(study)

    def load(self) -> OpenStudy:
        """The existing study; :class:`~dvt_hpo.exceptions.StudyNotFoundError` when the file,
        the database's tables or the study are missing, and nothing is written."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        return OpenStudy.of(_load_existing(self.url, self.name, self.source))

    def read(self) -> StoredStudy | None:
        """What the database holds about the study, without writing; ``None`` when none."""
        return _read_stored(self.url, self.name, self.source)


def _create_or_load(
    url: str,
    name: str,
    directions: Sequence[str],
    heartbeat: HeartbeatSettings | None,
    init: Callable[[optuna.Study], None] | None,
    source: str | Path | None,
) -> optuna.Study:
    import optuna

    # The storages an attempt opened: closed when it fails, so that a worker waiting for a
    # full server holds none of its connections.
    opened: list[Any] = []

    def create() -> optuna.Study:
        storage = make_storage(url, heartbeat)
        opened.append(storage)
        with quiet_experimental():
            study = optuna.create_study(
                storage=storage,
                study_name=name,
                directions=list(directions),
                load_if_exists=True,
            )
        if init is not None:
            init(study)
        if storage_kind(url) == "postgresql":
            add_indexes(storage)
            storage.set_study_system_attr(study_id_of(study), CREATED_ATTR, True)
        return study

    def load() -> optuna.Study:
        # The schema and the study exist and their creator's init ran: no lock needed.
        storage = rdb_storage(url, heartbeat, skip_table_creation=True)
        opened.append(storage)
        with quiet_experimental():
            study = optuna.load_study(study_name=name, storage=storage)
        if init is not None:
            init(study)
        return study

    def ready(conn: Any) -> bool:
        return _study_created(conn, name)

    deadline = time.monotonic() + _FULL_SERVER_RETRY_S
    pause = 0.1
    while True:
        try:
            if storage_kind(url) == "postgresql":
                if _study_created_at(url, name):
                    return load()
                with creation_lock(url, ready=ready) as held:
                    if held:
                        return create()
                return load()
            with creation_lock(url):
                if storage_kind(url) in ("sqlite", "journal"):
                    return create()
                return retry_creation_race(create)
        except DvtHpoError:
            raise
        except Exception as exc:
            # A server at max_connections refuses new ones until some close: wait (workers
            # started by the hundred end up queued here), as for a lock.
            if not is_server_full(exc) or time.monotonic() >= deadline:
                raise storage_error(exc, url, source=source) from None
        for storage in opened:
            with contextlib.suppress(Exception):
                storage.engine.dispose()
        opened.clear()
        # A storage whose constructor failed is reachable only from the exception's frames, a
        # reference cycle: collect it now, closing its connections, not at some later GC.
        gc.collect()
        time.sleep(random.uniform(pause / 2, pause))
        pause = min(pause * 2, 4.0)


# Marks a PostgreSQL study whose creation (schema, study, init) is complete, so later workers
# load it without the creation lock.
CREATED_ATTR = "dvt_hpo:created"
# How long opening a study waits for a server that refuses connections (max_connections).
_FULL_SERVER_RETRY_S = 600.0
_FULL_SERVER_WORDS = ("too many clients", "remaining connection slots are reserved")


def is_server_full(exc: BaseException) -> bool:
    """Whether ``exc`` is the server refusing a connection because it has max_connections."""
    current: BaseException | None = exc
    while current is not None:
        if any(w in str(current).lower() for w in _FULL_SERVER_WORDS):
            return True
        current = current.__cause__ or current.__context__
    return False


def _study_created(conn: Any, name: str) -> bool:
    """Whether study ``name`` exists with its creation complete (``CREATED_ATTR``)."""
    import sqlalchemy

    if not sqlalchemy.inspect(conn).has_table("study_system_attributes"):
        return False
    row = conn.execute(
        sqlalchemy.text(
            "SELECT 1 FROM studies s JOIN study_system_attributes a ON a.study_id = s.study_id "
            "WHERE s.study_name = :name AND a.key = :key"
        ),
        {"name": name, "key": CREATED_ATTR},
    ).first()
    conn.rollback()
    return row is not None


def _study_created_at(url: str, name: str) -> bool:
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    engine = sqlalchemy.create_engine(url, poolclass=NullPool, connect_args=lock_connect_args(url))
    try:
        with engine.connect() as conn:
            return _study_created(conn, name)
    finally:
        engine.dispose()


def _load_existing(url: str, name: str, source: str | Path | None) -> optuna.Study:
    import optuna

    kind = storage_kind(url)
    path = sqlite_path(url) or journal_path(url)
    if kind in ("sqlite", "journal") and (path is None or not path.is_file()):
        raise StudyNotFoundError(
            f"no study database yet: {path} does not exist",
            url=url,
            hint="run `dvt-hpo run` on the study file first",
            source=source,
        )
    try:
        if kind == "journal":
            assert path is not None
            storage: optuna.storages.BaseStorage = journal_storage(path)
        else:
            _require_schema(url)
            storage = rdb_storage(url, None)
        with quiet_experimental():
            return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        names = _study_names(storage)
        listed = f"; it holds {', '.join(repr(n) for n in names)}" if names else "; it is empty"
        raise StudyNotFoundError(
            f"no study named {name!r} in this database{listed}",
            url=url,
            hint="check study.name, or run `dvt-hpo run` first",
            source=source,
        ) from None
    except DvtHpoError:
        raise
    except Exception as exc:
        raise storage_error(exc, url, source=source) from None


def _require_schema(url: str) -> None:
    """Raise StudyNotFoundError when the database has no Optuna tables: opening it with
    ``RDBStorage`` would create them."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    kwargs = engine_kwargs(url)
    kwargs.pop("pool_pre_ping", None)
    kwargs.pop("pool_size", None)
    engine = sqlalchemy.create_engine(url, poolclass=NullPool, **kwargs)
    try:
        with engine.connect() as conn:
            has_studies = sqlalchemy.inspect(conn).has_table("studies")
    finally:
        engine.dispose()
    if not has_studies:
        raise StudyNotFoundError(
            "the database has no Optuna study tables yet",
            url=url,
            hint="run `dvt-hpo run` on the study file first",
        )


def _study_names(storage: Any) -> list[str]:
    with contextlib.suppress(Exception):
        return sorted(s.study_name for s in storage.get_all_studies())
    return []


def _read_stored(url: str, name: str, source: str | Path | None) -> StoredStudy | None:
    # A database that cannot be read is one StorageError line (study.storage, redacted).
    kind = storage_kind(url)
    try:
        storage = _read_journal(url) if kind == "journal" else _read_rdb(url, kind)
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


def _read_journal(url: str) -> Any:
    path = journal_path(url)
    if path is None or not path.is_file():
        return None
    # Reading a journal takes no lock; the backend's open("ab") of an existing file writes
    # nothing.
    return journal_storage(path)


def _read_rdb(url: str, kind: str) -> Any:
    import optuna
    import sqlalchemy

    kwargs: dict[str, Any] = {}
    if kind == "sqlite":
        path = sqlite_path(url)
        if path is None or not path.is_file():
            return None
        kwargs["creator"] = lambda: _sqlite_existing(path)
    elif kind == "postgresql":
        # libpq options of the URL (e.g. a search_path) are kept: connect_args would replace them.
        given = sqlalchemy.engine.make_url(url).query.get("options", "")
        given = " ".join(given) if isinstance(given, tuple) else given
        kwargs["connect_args"] = {
            **lock_connect_args(url),
            "options": f"{given} -c default_transaction_read_only=on".strip(),
        }
    engine = sqlalchemy.create_engine(url, **kwargs)
    try:
        tables = set(sqlalchemy.inspect(engine).get_table_names())
    finally:
        engine.dispose()
    if not tables >= _OPTUNA_TABLES:
        return None
    return optuna.storages.RDBStorage(
        url, engine_kwargs=kwargs, skip_table_creation=True, skip_compatibility_check=True
    )


def _sqlite_existing(path: Path) -> sqlite3.Connection:
    """A connection that never creates the file (``mode=rw``). Not ``mode=ro`` nor
    ``query_only``: either leaves the ``-wal``/``-shm`` files of a WAL database behind, where a
    plain connection that only reads removes them on close and changes nothing."""
    return sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=30, check_same_thread=False)
