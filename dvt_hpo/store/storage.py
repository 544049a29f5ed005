"""The study database: opening Optuna storages, creating or loading a study without races.

Supported URLs (see :mod:`dvt_hpo.studyfile.urls` for ``${VAR}`` expansion and redaction):

- ``sqlite:///relative.db`` / ``sqlite:////abs/path.db``: the embedded default. Opened in WAL
  mode with a long busy timeout, which is what removes "database is locked" when several
  workers on one machine share one file. WAL needs shared memory between the processes, which
  network file systems (NFS, SMB, sshfs...) do not give: there the file keeps SQLite's default
  rollback journal, and several machines should share PostgreSQL instead.
- ``postgresql://user:pass@host/db`` (and ``postgresql+psycopg2://``), ``mysql://``: any
  SQLAlchemy URL Optuna's ``RDBStorage`` accepts; the shared database of a team or cluster.
  Connections are checked before use (``pool_pre_ping``), so a restarted server is reconnected.
- ``journal:///relative.log`` / ``journal:////abs.log``: Optuna's journal file storage.

Every failure to open becomes one :class:`~dvt_hpo.store.errors.StorageError` line; secrets
are never printed or stored: every URL shown to a person goes through ``redact_url``.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import inspect
import random
import sqlite3
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dvt_hpo.exceptions import DvtHpoError, StudyNotFoundError
from dvt_hpo.optuna_api.private import storage_of, study_id_of, uncached
from dvt_hpo.store.errors import storage_error
from dvt_hpo.store.lock import creation_lock, lock_connect_args, retry_creation_race
from dvt_hpo.store.queries import add_indexes
from dvt_hpo.studyfile.urls import (
    expand_env,
    journal_path,
    sqlite_path,
    storage_kind,
)
from dvt_hpo.text.redact import redact_text, redact_url

if TYPE_CHECKING:
    import optuna

# SQLite's busy timeout: how long a writer waits for the lock before "database is locked".
_SQLITE_BUSY_TIMEOUT_S = 120.0
# How long a connection attempt to a database server may take before it counts as unreachable.
_CONNECT_TIMEOUT_S = 10

_PACKAGES = {"psycopg": "psycopg[binary]", "psycopg2": "psycopg2-binary", "mysqldb": "mysqlclient"}
# The dvt-hpo extra that installs a dialect's driver (mysqldb needs a C client library; the
# extra brings the pure-Python PyMySQL, for mysql+pymysql:// URLs).
_EXTRAS = {
    "postgresql": ("postgres", ""),
    "mysql": ("mysql", "mysql+pymysql://"),
    "mariadb": ("mysql", "mariadb+pymysql://"),
}


def check_storage_driver(url: str, source: str | Path | None = None) -> None:
    """Raise a SpecError naming the package to install when the URL's database driver is
    missing. SQLAlchemy picks the driver (``postgresql://`` means psycopg 3 since SQLAlchemy
    2.1, psycopg2 before), so ask its dialect rather than guessing."""
    from dvt_hpo.exceptions import SpecError

    kind = storage_kind(url)
    if kind in ("sqlite", "journal"):
        return
    import sqlalchemy

    try:
        dialect = sqlalchemy.engine.make_url(url).get_dialect()
    except Exception as exc:  # noqa: BLE001 - unknown dialects and malformed URLs alike
        raise SpecError(
            f"storage {redact_url(url)!r} is not a URL SQLAlchemy can open: "
            f"{redact_text(str(exc), url)}",
            file=source,
            field="study.storage",
        ) from None
    try:
        dialect.import_dbapi()
    except ImportError:
        package = _PACKAGES.get(dialect.driver, dialect.driver)
        extra, scheme = _EXTRAS.get(dialect.name, ("", ""))
        if extra and scheme and dialect.driver != "pymysql":
            also = f"; or write {scheme}... and pip install 'dvt-hpo[{extra}]'"
        elif extra:
            also = f" (or pip install 'dvt-hpo[{extra}]')"
        else:
            also = ""
        raise SpecError(
            f"storage {redact_url(url)!r} needs the database driver {dialect.driver!r}: "
            f"pip install {package!r}{also}",
            file=source,
            field="study.storage",
        ) from None


def unreachable_reason(url: str, *, timeout_s: int = 3) -> str | None:
    """None when the database server of ``url`` answers a query, else why not (redacted)."""
    import sqlalchemy

    try:
        engine = sqlalchemy.create_engine(url, connect_args={"connect_timeout": timeout_s})
        try:
            with engine.connect() as conn:
                conn.execute(sqlalchemy.text("SELECT 1"))
        finally:
            engine.dispose()
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"
        first = str(exc).splitlines()[0] if str(exc) else ""
        return redact_text(f"{type(exc).__name__}: {first}", url)
    return None


@dataclass(frozen=True)
class HeartbeatSettings:
    interval_s: int
    grace_period_s: int
    max_retries: int


# The mark of an attempt that failed of the machine (dvt_hpo.recovery.node_health): its kind; and
# on a copy, how many attempts of its chain did. Those retries are not the trial's: they are
# left out of trials.max_retries (node_health.machine_retry_limit caps them).
MACHINE_ATTR = "dvt_hpo:machine_failure"
MACHINE_RETRIES_ATTR = "dvt_hpo:machine_retries"


def retry_callback(max_retries: int | None) -> Any:
    """Optuna's callback that re-enqueues a failed trial's exact params (WAITING), at most
    ``max_retries`` times per original trial (``None``: the caller decided). Optuna 4.9 renamed
    it ``RetryHeartbeatStaleTrialCallback``; older releases only have
    ``RetryFailedTrialCallback``.
    """
    import optuna.storages as storages

    cls = getattr(storages, "RetryHeartbeatStaleTrialCallback", None)
    if cls is None:  # pragma: no cover - optuna < 4.9
        cls = storages.RetryFailedTrialCallback
    with _quiet_experimental():
        callback = cls(max_retry=max_retries)

    def retry(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        # Optuna copies the failed attempt's user attrs onto the copy: a retry that completes
        # would still show that attempt's status, reason and stderr tail. Its system attrs
        # too: ours (its heartbeat, its retry mark) belong to that attempt, not to the copy.
        fresh = copy.copy(trial)
        fresh.user_attrs = {}
        fresh.system_attrs = {
            k: v for k, v in trial.system_attrs.items() if not k.startswith("dvt_hpo:")
        }
        # The one mark a copy carries on: how many of its chain failed of the machine.
        machine = int(trial.system_attrs.get(MACHINE_RETRIES_ATTR) or 0) + bool(
            trial.system_attrs.get(MACHINE_ATTR)
        )
        if machine:
            fresh.system_attrs[MACHINE_RETRIES_ATTR] = machine
        callback(study, fresh)

    return retry


@contextlib.contextmanager
def _quiet_experimental() -> Iterator[None]:
    # Heartbeats and the retry callback have been "experimental" in Optuna since 2.8 and are
    # used here on purpose; the warning would only alarm users on every run.
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield


# File systems on which SQLite's WAL mode is unsafe: its index lives in shared memory that
# processes on different machines do not share.
_NETWORK_FILE_SYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "ceph", "glusterfs", "lustre", "gpfs"}
)


def filesystem_type(path: Path) -> str | None:
    """The type of the file system holding ``path`` (from /proc/self/mounts), None if unknown."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    target = str(path.resolve())
    best, fstype = "", None
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount_point = fields[1].replace("\\040", " ")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, fstype = mount_point, fields[2]
    return fstype


def is_network_filesystem(path: Path) -> bool:
    fstype = filesystem_type(path) or ""
    return fstype in _NETWORK_FILE_SYSTEMS or fstype.startswith("fuse.sshfs")


def _prepare_sqlite(path: Path) -> None:
    # WAL lets readers run beside the single writer; the mode is stored in the file, so setting
    # it once here covers every later connection from any process. Opening also proves early
    # that the folder is writable and the file is a database.
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=_SQLITE_BUSY_TIMEOUT_S)
    try:
        if is_network_filesystem(path.parent):
            conn.execute("PRAGMA schema_version").fetchone()
        else:
            conn.execute("PRAGMA journal_mode=WAL").fetchone()
    finally:
        conn.close()


def _engine_kwargs(url: str) -> dict[str, Any]:
    kind = storage_kind(url)
    if kind == "sqlite":
        return {"connect_args": {"timeout": _SQLITE_BUSY_TIMEOUT_S}}
    kwargs: dict[str, Any] = {
        # Server connections die when a database restarts or a proxy idles them out: check
        # each one before use so that the pool reconnects instead of failing the next call.
        "pool_pre_ping": True,
        # One connection kept per worker; the few more its threads need at the same instant
        # (heartbeats, trials recording) are opened and closed again. A hundred workers then
        # hold about a hundred connections, not three hundred (the server's max_connections
        # is often 100; see docs/concepts/storage.md, "Many workers on one PostgreSQL").
        "pool_size": 1,
    }
    if kind == "postgresql":
        kwargs["connect_args"] = lock_connect_args(url)
    return kwargs


def _rdb_storage(
    url: str, heartbeat: HeartbeatSettings | None, **extra: Any
) -> optuna.storages.RDBStorage:
    import optuna

    check = not extra.pop("skip_compatibility_check", False)
    # Optuna's own check keeps a session open while it opens a second connection: behind a
    # PgBouncer pool of N server connections, N workers loading at the same instant each hold
    # one and wait for another, forever. ``check_schema`` compares on one connection at a time.
    kwargs: dict[str, Any] = {
        "engine_kwargs": _engine_kwargs(url),
        "skip_compatibility_check": True,
        **extra,
    }
    if heartbeat is not None:
        kwargs["heartbeat_interval"] = heartbeat.interval_s
        kwargs["grace_period"] = heartbeat.grace_period_s
        params = inspect.signature(optuna.storages.RDBStorage).parameters
        callback_kw = (
            "heartbeat_stale_trial_callback"
            if "heartbeat_stale_trial_callback" in params
            else "failed_trial_callback"
        )
        kwargs[callback_kw] = retry_callback(heartbeat.max_retries)
    with _quiet_experimental():
        storage = optuna.storages.RDBStorage(url, **kwargs)
    if check:
        check_schema(storage)
    return storage


def check_schema(storage: optuna.storages.RDBStorage) -> None:
    """Refuse a database whose Optuna schema is not this Optuna's, as Optuna's
    ``skip_compatibility_check=False`` does, but holding at most one connection at a time."""
    import optuna

    current = storage.get_current_version()
    head = storage.get_head_version()
    if current == head:
        return
    if current in storage.get_all_versions():
        raise RuntimeError(
            f"the database's Optuna schema is {current}, older than this Optuna "
            f"({optuna.__version__}, schema {head}): upgrade it once with "
            "`optuna storage upgrade --storage <url>`"
        )
    raise RuntimeError(
        f"the database's Optuna schema {current} was written by a newer Optuna than this one "
        f"({optuna.__version__}): upgrade optuna where dvt-hpo runs"
    )


def _journal_storage(path: Path) -> optuna.storages.BaseStorage:
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    return JournalStorage(JournalFileBackend(str(path)))


def _open(url: str, heartbeat: HeartbeatSettings | None) -> optuna.storages.BaseStorage:
    kind = storage_kind(url)
    if kind == "journal":
        path = journal_path(url)
        assert path is not None
        path.parent.mkdir(parents=True, exist_ok=True)
        return _journal_storage(path)
    db = sqlite_path(url)
    if db is not None:
        _prepare_sqlite(db)
    return _rdb_storage(url, heartbeat)


def open_storage(
    url: str,
    heartbeat: HeartbeatSettings | None = None,
    *,
    source: str | Path | None = None,
) -> optuna.storages.BaseStorage:
    """Open (creating if needed) the Optuna storage at ``url``; one
    :class:`~dvt_hpo.store.errors.StorageError` line on any failure.

    With ``heartbeat``, RDB storages record trial heartbeats and fail trials whose heartbeat
    went stale (their orchestrator died), re-enqueueing their params through Optuna's retry
    callback. Journal storages have no heartbeat in Optuna; the runner reconciles them itself.
    Prefer :func:`create_or_load_study`, which also closes the creation race between workers.
    """
    try:
        with creation_lock(url):
            return _open(url, heartbeat)
    except DvtHpoError:
        raise
    except Exception as exc:
        raise storage_error(exc, url, source=source) from None


def create_or_load_study(
    url: str,
    name: str,
    directions: Sequence[str],
    *,
    sampler: optuna.samplers.BaseSampler | None = None,
    pruner: optuna.pruners.BasePruner | None = None,
    heartbeat: HeartbeatSettings | None = None,
    init: Callable[[optuna.Study], None] | None = None,
    source: str | Path | None = None,
) -> optuna.Study:
    """Open the storage at ``url`` and create the study ``name`` or load it if it exists, safely
    when many workers (processes, machines) do so at the same instant on a fresh database.

    The schema creation, the study creation and ``init(study)`` (e.g. storing the study's
    settings as user attrs, which races too) run under the database's creation lock
    (:mod:`dvt_hpo.store.lock`). A stored study keeps its directions: compare
    ``study.directions`` with yours afterwards. Failures to reach or open the database raise
    one :class:`~dvt_hpo.store.errors.StorageError` line; errors raised by ``init`` (e.g. a
    :class:`~dvt_hpo.exceptions.SpecError`) propagate unchanged.
    """
    import optuna

    # The storages an attempt opened: closed when it fails, so that a worker waiting for a
    # full server holds none of its connections.
    opened: list[Any] = []

    def create() -> optuna.Study:
        storage = _open(url, heartbeat)
        opened.append(storage)
        with _quiet_experimental():
            study = optuna.create_study(
                storage=storage,
                study_name=name,
                directions=list(directions),
                sampler=sampler,
                pruner=pruner,
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
        storage = _rdb_storage(url, heartbeat, skip_table_creation=True)
        opened.append(storage)
        with _quiet_experimental():
            study = optuna.load_study(
                study_name=name, storage=storage, sampler=sampler, pruner=pruner
            )
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


def open_existing(
    url: str,
    name: str,
    *,
    heartbeat: HeartbeatSettings | None = None,
    source: str | Path | None = None,
) -> optuna.Study:
    """Load the existing study ``name`` for a command that must never create anything
    (``status``, ``best``, ``validate`` of a stored study). A missing file, database, schema or
    study raises :class:`~dvt_hpo.store.errors.StudyNotFoundError`, and nothing is written.
    """
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
            storage: optuna.storages.BaseStorage = _journal_storage(path)
        else:
            _require_schema(url)
            storage = _rdb_storage(url, heartbeat)
        with _quiet_experimental():
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

    kwargs = _engine_kwargs(url)
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


def study_storage(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The storage a study was opened on, without Optuna's per-study trial cache (which wraps
    RDB storages and loads every trial on first use): for our own reads and heartbeats."""
    return uncached(storage_of(study))


def supports_heartbeat(storage: Any) -> bool:
    """Whether ``storage`` records trial heartbeats (RDB storages opened with a heartbeat)."""
    get_interval = getattr(storage, "get_heartbeat_interval", None)
    return callable(get_interval) and get_interval() is not None


__all__ = [
    "MACHINE_ATTR",
    "MACHINE_RETRIES_ATTR",
    "HeartbeatSettings",
    "check_storage_driver",
    "create_or_load_study",
    "expand_env",
    "journal_path",
    "open_existing",
    "open_storage",
    "retry_callback",
    "supports_heartbeat",
    "unreachable_reason",
]
