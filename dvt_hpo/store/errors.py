"""Storage failures as one line, and retries through database outages.

Drivers raise exceptions whose text spans lines, chains two or three causes and may quote the
URL or its password. :func:`storage_error` turns any of them into one :class:`StorageError`
line that names ``study.storage``, the redacted URL and what to check; :func:`with_retry` rides
out a database restart by retrying only connection-level failures.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from dvt_hpo.exceptions import StorageError, one_line
from dvt_hpo.text.redact import redact_text, redact_url

T = TypeVar("T")

# The longest pause between two tries: long enough not to hammer a restarting server, short
# enough that a server back after 10 s is noticed within a few seconds.
MAX_BACKOFF_S = 4.0
_FIRST_BACKOFF_S = 0.1


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and its causes: Optuna wraps SQLAlchemy errors, which wrap the driver's."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        orig = getattr(current, "orig", None)  # SQLAlchemy's DBAPIError keeps the driver's here
        if isinstance(orig, BaseException) and id(orig) not in seen:
            yield orig
            seen.add(id(orig))
        current = current.__cause__ or current.__context__


def _driver_text(exc: BaseException) -> str:
    """The most specific message in the chain (the driver's, not the wrappers')."""
    texts = [str(e) for e in _chain(exc) if str(e)]
    return texts[-1] if texts else type(exc).__name__


# (pattern in the driver's message, problem, what to check), first match wins. The patterns
# are PostgreSQL's, libpq's and SQLite's own wording, stable across their releases.
_KNOWN: tuple[tuple[str, str, str], ...] = (
    (
        "password authentication failed",
        "authentication failed",
        "check the user name and password (e.g. the variable the URL comes from, ${DB_URL})",
    ),
    (
        "no password supplied",
        "the server wants a password and the URL has none",
        "add user:password to the URL, e.g. through ${DB_URL}",
    ),
    (
        r'role ".*" does not exist',
        "the database user does not exist",
        "check the user name in the URL",
    ),
    (
        r'database ".*" does not exist',
        "the database does not exist on the server",
        "create it (createdb NAME) or fix the database name at the end of the URL",
    ),
    (
        "connection refused",
        "cannot connect to the database server",
        "check that the server runs and that host and port are right",
    ),
    (
        "could not translate host name|failed to resolve host",
        "unknown host",
        "check the host name in the URL",
    ),
    (
        "timeout expired",
        "the database server did not answer in time",
        "check host, port and firewalls",
    ),
    (
        "file is not a database",
        "the file exists but is not an SQLite database",
        "point study.storage at a new file or at an existing study database",
    ),
    (
        "unable to open database file",
        "cannot create or open the SQLite file",
        "check that its folder exists and is writable",
    ),
    (
        "readonly database",
        "the SQLite file is read-only",
        "check the permissions of the file and of its folder",
    ),
)


def storage_error(
    exc: BaseException, url: str, *, source: str | Path | None = None
) -> StorageError:
    """One :class:`StorageError` line for any failure to open or use the storage at ``url``."""
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, OSError) and not _is_db_error(exc):
        return _os_error(exc, url, source)
    text = one_line(redact_text(_driver_text(exc), url))
    lowered = text.lower()
    for pattern, problem, hint in _KNOWN:
        if re.search(pattern, lowered):
            return StorageError(f"{problem} ({text})", url=url, hint=hint, source=source)
    return StorageError(
        f"{type(exc).__name__}: {text}",
        url=url,
        hint="check the URL and that the database is reachable",
        source=source,
    )


def _is_db_error(exc: BaseException) -> bool:
    # psycopg's and sqlite3's errors are not OSErrors; but keep the check explicit.
    return type(exc).__module__.split(".")[0] in ("psycopg", "psycopg2", "sqlite3", "sqlalchemy")


def _os_error(exc: OSError, url: str, source: str | Path | None) -> StorageError:
    where = f" {exc.filename}" if exc.filename else ""
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    if isinstance(exc, (NotADirectoryError, FileExistsError)):
        hint = "a part of the path is a file, not a folder: choose another path"
    elif isinstance(exc, PermissionError):
        hint = "check that the folder is writable by this user"
    else:
        hint = "check that the path is on a writable local or shared disk"
    return StorageError(f"cannot write{where}: {reason}", url=url, hint=hint, source=source)


# -- outages ---------------------------------------------------------------------------------
_DISCONNECT_WORDS = (
    "connection refused",
    "server closed the connection",
    "terminating connection",
    "connection is closed",
    "connection already closed",
    "could not connect",
    "connection to server",
    "the database system is shutting down",
    "the database system is starting up",
    "the database system is in recovery mode",
    "ssl connection has been closed",
    "connection reset",
    "server closed",
    "administrator command",
    "broken pipe",
    "connection timed out",
    "consuming input failed",
)


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or a cause) means the database connection was lost or refused.

    True for SQLAlchemy's disconnects (``connection_invalidated``), ``DisconnectionError`` and
    psycopg's ``OperationalError``/``InterfaceError`` about the connection; False for anything
    else (bad SQL, integrity errors, SQLite's "database is locked", which its busy timeout
    already waits on).
    """
    for e in _chain(exc):
        if getattr(e, "connection_invalidated", False):
            return True
        name = type(e).__name__
        module = type(e).__module__.split(".")[0]
        if name == "DisconnectionError" and module == "sqlalchemy":
            return True
        if module in ("sqlite3",):
            return False
        mro = {c.__name__ for c in type(e).__mro__}
        if module in ("psycopg", "psycopg2") and "OperationalError" in mro:
            # Its subclasses (AdminShutdown when a server stops mid-transaction,
            # CannotConnectNow while it starts) are the server going away or coming back.
            return True
        if module == "sqlalchemy" and name == "PendingRollbackError":
            return True  # a session whose connection dropped mid-transaction
        if name in ("OperationalError", "InterfaceError") and module in (
            "psycopg",
            "psycopg2",
            "sqlalchemy",
            "pymysql",
            "MySQLdb",
        ):
            text = str(e).lower()
            if name == "InterfaceError" or any(w in text for w in _DISCONNECT_WORDS):
                return True
    return False


def with_retry(
    fn: Callable[[], T],
    *,
    retry_s: float,
    what: str,
    url: str,
    on_retry: Callable[[BaseException, float], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``fn()``, retried with exponential backoff (0.1 s doubling up to 4 s) while it fails
    with a connection-level error, for at most ``retry_s`` seconds; then a one-line
    :class:`StorageError` naming ``what``. Any other error propagates at once, unchanged.

    ``on_retry(exc, waited_s)`` is called before each pause (e.g. to print "database
    unreachable, retrying" once). ``fn`` must be safe to call again after a failure: Optuna's
    RDB calls are single transactions, rolled back when the connection drops.
    """
    start = clock()
    pause = _FIRST_BACKOFF_S
    while True:
        try:
            return fn()
        except Exception as exc:
            if not is_connection_error(exc):
                raise
            waited = clock() - start
            if waited >= retry_s:
                error = storage_error(exc, url)
                raise StorageError(
                    f"{what} failed: the database stayed unreachable for {waited:.0f} s "
                    f"({error.problem})",
                    url=url,
                    hint="check the server; rerun the same command to resume (trials are "
                    "recorded for a retry), or raise study.storage_retry_s",
                ) from None
            if on_retry is not None:
                on_retry(exc, waited)
            sleep(min(pause, max(0.0, retry_s - waited)))
            pause = min(pause * 2, MAX_BACKOFF_S)


class OutageRetry:
    """Calls on one storage, each retried while the database is unreachable for up to
    ``retry_s`` (:func:`with_retry`); an outage is said once when it starts and once when the
    database answers again, however many calls met it (trials keep training meanwhile)."""

    def __init__(self, url: str, retry_s: float, *, out: Callable[[str], None]) -> None:
        self._url = url
        self._retry_s = retry_s
        self._out = out
        self._down_since: float | None = None  # monotonic time the outage was first seen
        self._back_at: float | None = None  # monotonic time the last outage ended

    def __call__(self, call: Callable[[], T], what: str) -> T:
        result = with_retry(
            call, retry_s=self._retry_s, what=what, url=self._url, on_retry=self._on_retry
        )
        self._ended()
        return result

    def _ended(self) -> None:
        """A call went through: an outage under way is over."""
        if self._down_since is not None:
            down_s = time.monotonic() - self._down_since
            self._down_since = None
            self._back_at = time.monotonic()
            self._out(f"database reachable again after {down_s:.0f} s")

    def once(self, call: Callable[[], T]) -> T:
        """``call()`` tried once, its errors raised, but a failure to reach the database still
        counts as an outage (and a success after one ends it): a background thread's periodic
        call (heartbeats) is not worth retrying, yet the outage it met must keep this worker
        from judging others' heartbeats, which could not land either (:meth:`met_outage_within`).
        A worker whose only storage calls during an outage were those would otherwise fail
        every other worker's live trials as stale the moment the database came back."""
        try:
            result = call()
        except Exception as exc:
            if is_connection_error(exc):
                self._on_retry(exc, 0.0)
            raise
        self._ended()
        return result

    def met_outage_within(self, seconds: float) -> bool:
        """Whether the database is unreachable now or was within the last ``seconds``: no
        worker could record a heartbeat then, so none can be judged stale by it yet."""
        if self._down_since is not None:
            return True
        return self._back_at is not None and time.monotonic() - self._back_at < seconds

    def _on_retry(self, exc: BaseException, waited_s: float) -> None:
        if self._down_since is None:
            self._down_since = time.monotonic()
            self._out(
                f"database unreachable ({redact_url(self._url)}): retrying for up to "
                f"{self._retry_s:g} s; trials keep training"
            )
