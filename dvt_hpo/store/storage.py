"""The study database's Optuna storages: building one for a URL, drivers, heartbeats, WAL.

A study is opened through :class:`dvt_hpo.store.opening.StudyAt` (create or load under the
creation lock, load an existing one, read without writing); this module builds the storages it
opens on.

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
import inspect
import sqlite3
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dvt_hpo.optuna_api.private import storage_of, uncached
from dvt_hpo.store.lock import lock_connect_args
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
# trials.pause: set on an attempt, to its own number, before it is told PRUNED with its resume
# state kept (dvt_hpo.recovery.pause); the number, not True, as RETRY_ATTR: a copy never matches.
PAUSED_ATTR = "dvt_hpo:paused"
# On a copy: how many attempts before it in its chain were paused (not failed): they are not
# retries, so they never use up trials.max_retries.
PAUSES_ATTR = "dvt_hpo:pauses"


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
    with quiet_experimental():
        callback = cls(max_retry=max_retries)

    def retry(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        # Optuna copies the failed attempt's user attrs onto the copy: a retry that completes
        # would still show that attempt's status, reason and stderr tail. Its system attrs
        # too: ours (its heartbeat, its retry mark) belong to that attempt, not to the copy.
        fresh = copy.copy(trial)
        fresh.user_attrs = {}
        # Deep: Optuna appends to the copied ``retry_history`` list in place, which would
        # change the failed trial's own (cached) attrs.
        fresh.system_attrs = {
            k: copy.deepcopy(v)
            for k, v in trial.system_attrs.items()
            if not k.startswith("dvt_hpo:")
        }
        # The one mark a copy carries on: how many of its chain failed of the machine.
        machine = int(trial.system_attrs.get(MACHINE_RETRIES_ATTR) or 0) + bool(
            trial.system_attrs.get(MACHINE_ATTR)
        )
        if machine:
            fresh.system_attrs[MACHINE_RETRIES_ATTR] = machine
        # And how many of its chain were paused, not failed (trials.pause).
        pauses = int(trial.system_attrs.get(PAUSES_ATTR) or 0) + (
            trial.system_attrs.get(PAUSED_ATTR) == trial.number
        )
        if pauses:
            fresh.system_attrs[PAUSES_ATTR] = pauses
        callback(study, fresh)

    return retry


@contextlib.contextmanager
def quiet_experimental() -> Iterator[None]:
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


def _wal_commits_sync_at_checkpoints(dbapi_connection: Any, _record: Any) -> None:
    # SQLite's default (synchronous=FULL) syncs the write-ahead log at every commit: about 10
    # per trial, 0.5 ms each on a quiet SSD and 4 ms on a loaded one, and the write lock is held
    # meanwhile, which other workers wait on. In WAL mode NORMAL syncs at checkpoints only and
    # stays consistent; a killed process loses nothing (its commits are in the log), a power
    # cut or kernel crash can lose the last commits before it, never the file
    # (docs/concepts/storage.md). A database in another journal mode keeps FULL: there NORMAL
    # could corrupt it on a power cut.
    cursor = dbapi_connection.cursor()
    try:
        (mode,) = cursor.execute("PRAGMA journal_mode").fetchone()
        if str(mode).lower() == "wal":
            cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def engine_kwargs(url: str) -> dict[str, Any]:
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


def rdb_storage(
    url: str, heartbeat: HeartbeatSettings | None, **extra: Any
) -> optuna.storages.RDBStorage:
    import optuna

    check = not extra.pop("skip_compatibility_check", False)
    # Optuna's own check keeps a session open while it opens a second connection: behind a
    # PgBouncer pool of N server connections, N workers loading at the same instant each hold
    # one and wait for another, forever. ``check_schema`` compares on one connection at a time.
    kwargs: dict[str, Any] = {
        "engine_kwargs": engine_kwargs(url),
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
    with quiet_experimental():
        storage = optuna.storages.RDBStorage(url, **kwargs)
    if sqlite_path(url) is not None:  # a file; an in-memory database would not outlive dispose
        import sqlalchemy

        sqlalchemy.event.listen(storage.engine, "connect", _wal_commits_sync_at_checkpoints)
        storage.engine.dispose()  # the connection Optuna's table creation opened: without it
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


def journal_storage(path: Path) -> optuna.storages.BaseStorage:
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    return JournalStorage(JournalFileBackend(str(path)))


def make_storage(url: str, heartbeat: HeartbeatSettings | None) -> optuna.storages.BaseStorage:
    kind = storage_kind(url)
    if kind == "journal":
        path = journal_path(url)
        assert path is not None
        path.parent.mkdir(parents=True, exist_ok=True)
        return journal_storage(path)
    db = sqlite_path(url)
    if db is not None:
        _prepare_sqlite(db)
    return rdb_storage(url, heartbeat)


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
    "PAUSED_ATTR",
    "PAUSES_ATTR",
    "HeartbeatSettings",
    "check_storage_driver",
    "check_schema",
    "engine_kwargs",
    "expand_env",
    "journal_path",
    "journal_storage",
    "make_storage",
    "quiet_experimental",
    "rdb_storage",
    "retry_callback",
    "study_storage",
    "supports_heartbeat",
    "unreachable_reason",
]
