"""Storage URLs: resolution, redaction, and the Optuna storage with heartbeats and retries.

Supported URLs:

- ``sqlite:///relative.db`` / ``sqlite:////abs/path.db``: the embedded default. Opened in WAL
  mode with a long busy timeout, which is what removes "database is locked" when several
  workers share one file.
- ``postgresql://user:pass@host/db`` (and ``postgresql+psycopg2://``), ``mysql://``: any
  SQLAlchemy URL Optuna's ``RDBStorage`` accepts; the shared database of a team or cluster.
- ``journal:///relative.log`` / ``journal:////abs.log``: Optuna's journal file storage.

Secrets are never printed or stored: every URL shown to a person goes through
:func:`redact_url`.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import re
import sqlite3
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

_SQLITE_PREFIX = "sqlite:///"
_JOURNAL_PREFIX = "journal:///"
# SQLite's busy timeout: how long a writer waits for the lock before "database is locked".
_SQLITE_BUSY_TIMEOUT_S = 120.0

_CREDENTIALS = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^:@/]*)(?::[^@/]*)?@")


def redact_url(url: str) -> str:
    """Return ``url`` with any password replaced by ``***`` (``user:***@host``).

    Query parameters named like secrets (``password=``, ``sslpassword=``, ``token=``) are
    redacted too.
    """
    redacted = _CREDENTIALS.sub(
        lambda m: f"{m['scheme']}{m['user']}:***@" if m.group(0).count(":") > 1 else m.group(0),
        url,
    )
    return re.sub(
        r"(?i)([?&](?:password|sslpassword|passwd|pwd|token|secret)=)[^&]*", r"\1***", redacted
    )


def resolve_url(url: str, base_dir: Path) -> str:
    """Make relative ``sqlite:///`` and ``journal:///`` paths absolute against ``base_dir``."""
    for prefix in (_SQLITE_PREFIX, _JOURNAL_PREFIX):
        if url.startswith(prefix):
            rest = url[len(prefix) :]
            if rest == ":memory:" or rest.startswith("/") or rest == "":
                return url
            path, sep, query = rest.partition("?")
            return prefix + str((base_dir / path).resolve()) + sep + query
    return url


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///`` URL (None for other URLs and ``:memory:``)."""
    if not url.startswith(_SQLITE_PREFIX):
        return None
    rest = url[len(_SQLITE_PREFIX) :].partition("?")[0]
    if rest in ("", ":memory:"):
        return None
    return Path(rest)


def journal_path(url: str) -> Path | None:
    if not url.startswith(_JOURNAL_PREFIX):
        return None
    return Path(url[len(_JOURNAL_PREFIX) :])


def storage_kind(url: str) -> str:
    """``sqlite``, ``journal``, or the SQLAlchemy dialect name (``postgresql``, ``mysql``)."""
    if url.startswith(_JOURNAL_PREFIX):
        return "journal"
    return url.split(":", 1)[0].split("+", 1)[0]


_PACKAGES = {"psycopg": "psycopg[binary]", "psycopg2": "psycopg2-binary", "mysqldb": "mysqlclient"}


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
            f"storage {redact_url(url)!r} is not a URL SQLAlchemy can open: {exc}",
            file=source,
            field="study.storage",
        ) from None
    try:
        dialect.import_dbapi()
    except ImportError:
        package = _PACKAGES.get(dialect.driver, dialect.driver)
        raise SpecError(
            f"storage {redact_url(url)!r} needs the database driver {dialect.driver!r}: "
            f"pip install {package!r} (or pip install 'dvt-hpo[postgres]')",
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
        return redact_url(f"{type(exc).__name__}: {first}")
    return None


@dataclass(frozen=True)
class HeartbeatSettings:
    interval_s: int
    grace_period_s: int
    max_retries: int


def retry_callback(max_retries: int) -> Any:
    """Optuna's callback that re-enqueues a failed trial's exact params (WAITING), at most
    ``max_retries`` times per original trial. Optuna 4.9 renamed it
    ``RetryHeartbeatStaleTrialCallback``; older releases only have ``RetryFailedTrialCallback``.
    """
    import optuna.storages as storages

    cls = getattr(storages, "RetryHeartbeatStaleTrialCallback", None)
    if cls is None:  # pragma: no cover - optuna < 4.9
        cls = storages.RetryFailedTrialCallback
    with _quiet_experimental():
        callback = cls(max_retry=max_retries)

    def retry(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        # Optuna copies the failed attempt's user attrs onto the copy: a retry that completes
        # would still show that attempt's status, reason and stderr tail.
        fresh = copy.copy(trial)
        fresh.user_attrs = {}
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


def _enable_sqlite_wal(path: Path) -> None:
    # WAL lets readers run beside the single writer; the mode is stored in the file, so setting
    # it once here covers every later connection from any process.
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=_SQLITE_BUSY_TIMEOUT_S)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()


def open_storage(
    url: str, heartbeat: HeartbeatSettings | None = None
) -> optuna.storages.BaseStorage:
    """Open (creating if needed) the Optuna storage at ``url``.

    With ``heartbeat``, RDB storages record trial heartbeats and fail trials whose heartbeat
    went stale (their orchestrator died), re-enqueueing their params through Optuna's retry
    callback. Journal storages have no heartbeat in Optuna; the runner reconciles them itself.
    """
    import optuna

    kind = storage_kind(url)
    if kind == "journal":
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        path = journal_path(url)
        assert path is not None
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))

    engine_kwargs: dict[str, Any] = {}
    if kind == "sqlite":
        db = sqlite_path(url)
        if db is not None:
            _enable_sqlite_wal(db)
        engine_kwargs["connect_args"] = {"timeout": _SQLITE_BUSY_TIMEOUT_S}
    else:
        # Server connections die when a database restarts or a proxy idles them out.
        engine_kwargs["pool_pre_ping"] = True

    kwargs: dict[str, Any] = {"engine_kwargs": engine_kwargs}
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
        return optuna.storages.RDBStorage(url, **kwargs)


def supports_heartbeat(storage: Any) -> bool:
    """Whether ``storage`` records trial heartbeats (RDB storages opened with a heartbeat)."""
    get_interval = getattr(storage, "get_heartbeat_interval", None)
    return callable(get_interval) and get_interval() is not None
