"""One lock per study database around schema and study creation.

Optuna's ``RDBStorage.__init__`` runs ``CREATE TABLE`` for its schema, and ``create_study``
inserts the study: two processes doing either at the same instant on a fresh database fail
(``table studies already exists``, duplicate version rows). Workers started together take this
lock, so the first creates and the others find everything in place:

- PostgreSQL: a session-level ``pg_advisory_lock`` in the database itself, which works across
  machines and is released by the server if the holder dies;
- SQLite and journal files: ``fcntl.flock`` on the folder that holds the file. Locking the
  folder rather than a lock file beside the database writes nothing (a failed open leaves no
  stray file) and is released by the kernel when the holder dies. ``flock`` is local to one
  machine on most network file systems, which is one more reason to keep a SQLite file that
  several machines share out of a network disk (use PostgreSQL);
- other SQLAlchemy dialects: no lock; :func:`retry_creation_race` retries the specific
  "already exists" and duplicate-key errors a bounded number of times.

:func:`retry_lock` is the same kind of lock, one per study, around enqueuing the copies of
failed attempts (:func:`dvt_hpo.study.recovery.enqueue_retries`): whoever holds it sees every copy
enqueued before, so a copy is enqueued once however many workers repair at the same instant,
and a holder killed halfway leaves the lock to the next one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from dvt_hpo.store.urls import journal_path, sqlite_path, storage_kind

T = TypeVar("T")

# One fixed 64-bit key in the database's advisory-lock space, derived from a name so that it
# does not collide with an application's small integer keys.
ADVISORY_KEY = int.from_bytes(hashlib.sha256(b"dvt-hpo:create").digest()[:8], "big", signed=True)
# How long a worker waits for another one to finish creating the schema and the study.
LOCK_TIMEOUT_S = 120
# How long a worker waits for another one to enqueue retries before leaving it to its next
# sweep (the failed attempts are marked, so nothing is lost by waiting).
RETRY_LOCK_TIMEOUT_S = 10
_KEEPALIVE = {"tcp_keepalives_idle": 10, "tcp_keepalives_interval": 5, "tcp_keepalives_count": 3}
_CREATION_RACE_TRIES = 5
_RACE_WORDS = ("already exists", "duplicate", "unique constraint")


@contextlib.contextmanager
def creation_lock(url: str, *, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the creation lock of the database at ``url`` (see the module docstring).

    Connection failures on the way propagate as the driver raises them; the caller turns them
    into one line with :func:`dvt_hpo.store.errors.storage_error`.
    """
    kind = storage_kind(url)
    if kind in ("sqlite", "journal"):
        path = sqlite_path(url) or journal_path(url)
        if path is None:  # sqlite in memory: one process only
            yield
            return
        with folder_lock(path.parent):
            yield
    elif kind == "postgresql":
        with _advisory_lock(url, timeout_s):
            yield
    else:
        yield


@contextlib.contextmanager
def retry_lock(
    url: str, study_id: int, *, timeout_s: float = RETRY_LOCK_TIMEOUT_S
) -> Iterator[None]:
    """Hold the retry lock of study ``study_id`` at ``url`` (see the module docstring); raises
    TimeoutError when another worker holds it for longer than ``timeout_s``."""
    kind = storage_kind(url)
    if kind in ("sqlite", "journal"):
        path = sqlite_path(url) or journal_path(url)
        if path is None:  # sqlite in memory: one process only
            yield
            return
        # One lock for the folder's studies: repairs are rare and take milliseconds.
        with folder_lock(path.parent, timeout_s=timeout_s):
            yield
    elif kind == "postgresql":
        key = int.from_bytes(
            hashlib.sha256(f"dvt-hpo:retry:{study_id}".encode()).digest()[:8], "big", signed=True
        )
        with _advisory_lock(url, timeout_s, key=key, keepalive=True):
            yield
    else:
        yield


@contextlib.contextmanager
def folder_lock(folder: Path, *, timeout_s: float | None = None) -> Iterator[None]:
    """An exclusive ``flock`` on ``folder`` (created if missing); with ``timeout_s``,
    TimeoutError when it is not free within that time."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if timeout_s is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise TimeoutError(f"{folder} stayed locked for {timeout_s:g} s") from None
                    time.sleep(0.02)  # flock has no timed wait; holders keep it milliseconds
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@contextlib.contextmanager
def _advisory_lock(
    url: str, timeout_s: float, *, key: int = ADVISORY_KEY, keepalive: bool = False
) -> Iterator[None]:
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    engine = sqlalchemy.create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 10})
    try:
        with engine.connect() as conn:
            # lock_timeout bounds the wait for the advisory lock too; SET takes no parameters.
            conn.execute(sqlalchemy.text(f"SET lock_timeout = {int(timeout_s * 1000)}"))
            if keepalive:
                # The server frees a session's advisory lock when the session ends: when its
                # process dies, at once; when its machine is lost, only once TCP keepalive
                # gives up (2 h by default). These make that about 25 s.
                for name, value in _KEEPALIVE.items():
                    conn.execute(sqlalchemy.text(f"SET {name} = {value}"))
            try:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": key})
            except sqlalchemy.exc.OperationalError as exc:
                if "lock timeout" in str(exc).lower():
                    raise TimeoutError(f"advisory lock busy for {timeout_s:g} s") from exc
                raise
            conn.commit()  # a session-level lock outlives the transaction; end it
            try:
                yield
            finally:
                with contextlib.suppress(Exception):  # a lost connection released it already
                    conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": key})
                    conn.commit()
    finally:
        engine.dispose()


def is_creation_race(exc: BaseException) -> bool:
    """Whether ``exc`` is a schema or study creation colliding with another worker's."""
    current: BaseException | None = exc
    while current is not None:
        name = type(current).__name__
        if name in ("IntegrityError", "ProgrammingError", "OperationalError") and any(
            w in str(current).lower() for w in _RACE_WORDS
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


def retry_creation_race(fn: Callable[[], T], *, tries: int = _CREATION_RACE_TRIES) -> T:
    """``fn()``, called again (at most ``tries`` times in all) while it fails only because
    another worker created the same tables or study at the same instant. Any other error, and
    the last race, propagate."""
    for attempt in range(tries):
        try:
            return fn()
        except Exception as exc:
            if attempt == tries - 1 or not is_creation_race(exc):
                raise
    raise AssertionError("unreachable")  # pragma: no cover
