"""One lock per study database around schema and study creation.

Optuna's ``RDBStorage.__init__`` runs ``CREATE TABLE`` for its schema, and ``create_study``
inserts the study: two processes doing either at the same instant on a fresh database fail
(``table studies already exists``, duplicate version rows). Workers started together take this
lock, so the first creates and the others find everything in place:

- PostgreSQL: a transaction-level advisory lock (``pg_try_advisory_xact_lock``) in the
  database itself, held by one open transaction on a connection of its own: it works across
  machines, is released by the server if the holder dies, and stays correct behind PgBouncer
  in transaction pooling (a session-level lock would stay on a pooled server connection).
  Waiting is polling with backoff and jitter, not a blocking wait that a ``lock_timeout``
  cancels: a hundred workers started at once wait their turn without an error, and each
  wait first asks ``ready()`` (the study exists already), so that a worker that finds the
  study stops waiting and loads it without the lock;
- SQLite and journal files: ``fcntl.flock`` on the folder that holds the file. Locking the
  folder rather than a lock file beside the database writes nothing (a failed open leaves no
  stray file) and is released by the kernel when the holder dies. ``flock`` is local to one
  machine on most network file systems, which is one more reason to keep a SQLite file that
  several machines share out of a network disk (use PostgreSQL);
- other SQLAlchemy dialects: no lock; :func:`retry_creation_race` retries the specific
  "already exists" and duplicate-key errors a bounded number of times.

:func:`retry_lock` is the same kind of lock, one per study, around enqueuing the copies of
failed attempts (:func:`dvt_hpo.recovery.retries.enqueue_retries`): whoever holds it sees every copy
enqueued before, so a copy is enqueued once however many workers repair at the same instant,
and a holder killed halfway leaves the lock to the next one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from dvt_hpo.studyfile.urls import journal_path, sqlite_path, storage_kind

T = TypeVar("T")

# One fixed 64-bit key in the database's advisory-lock space, derived from a name so that it
# does not collide with an application's small integer keys.
ADVISORY_KEY = int.from_bytes(hashlib.sha256(b"dvt-hpo:create").digest()[:8], "big", signed=True)
# How long a worker waits for another one to finish creating the schema and the study. A
# holder that died releases the lock at once (its connection or process ends), so the wait
# only bounds a live holder that makes no progress; 128 workers started together on 2 cores
# took 6 minutes to create and load (benchmarks/overheads/many_workers.py).
LOCK_TIMEOUT_S = 900
# How long a worker waits for another one to enqueue retries before leaving it to its next
# sweep (the failed attempts are marked, so nothing is lost by waiting).
RETRY_LOCK_TIMEOUT_S = 10
# The server frees an advisory lock when its holder's connection ends: when the process dies, at
# once; when its machine is lost, only once TCP keepalive gives up (2 h by default). These
# make that about 25 s for the retry lock, whose holders are workers on other machines.
_KEEPALIVE = {"tcp_keepalives_idle": 10, "tcp_keepalives_interval": 5, "tcp_keepalives_count": 3}
_CREATION_RACE_TRIES = 5
# Backoff between two tries of the PostgreSQL lock: from the first to the last pause (seconds),
# each one drawn in [pause/2, pause] so that workers started together do not retry together.
_FIRST_POLL_S = 0.05
_MAX_POLL_S = 1.0
_RACE_WORDS = ("already exists", "duplicate", "unique constraint")


class LockTimeout(TimeoutError):
    """The creation lock stayed taken for ``timeout_s``."""


@contextlib.contextmanager
def creation_lock(
    url: str, *, timeout_s: float = LOCK_TIMEOUT_S, ready: Callable[[Any], bool] | None = None
) -> Iterator[bool]:
    """Hold the creation lock of the database at ``url`` (see the module docstring); yields
    True, or False when ``ready(connection)`` (a SQLAlchemy connection to the database) turned
    true while waiting for a PostgreSQL lock (nothing
    left to create: the caller loads what exists, without the lock).

    Connection failures on the way propagate as the driver raises them; the caller turns them
    into one line with :func:`dvt_hpo.store.errors.storage_error`.
    """
    kind = storage_kind(url)
    if kind in ("sqlite", "journal"):
        path = sqlite_path(url) or journal_path(url)
        if path is None:  # sqlite in memory: one process only
            yield True
            return
        with folder_lock(path.parent):
            yield True
    elif kind == "postgresql":
        with _advisory_lock(url, timeout_s, ready) as held:
            yield held
    else:
        yield True


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
        with _advisory_lock(url, timeout_s, None, key=key, keepalive=True):
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
    url: str,
    timeout_s: float,
    ready: Callable[[Any], bool] | None,
    *,
    key: int = ADVISORY_KEY,
    keepalive: bool = False,
) -> Iterator[bool]:
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    engine = sqlalchemy.create_engine(url, poolclass=NullPool, connect_args=lock_connect_args(url))
    try:
        end = time.monotonic() + timeout_s
        pause = _FIRST_POLL_S
        while True:
            # A waiter holds no connection between its tries: a hundred workers waiting must
            # leave the server's connections to the one that creates.
            conn = engine.connect()
            try:
                if keepalive:
                    # SET LOCAL: behind PgBouncer the server session outlives this transaction.
                    for name, value in _KEEPALIVE.items():
                        conn.execute(sqlalchemy.text(f"SET LOCAL {name} = {value}"))
                # A transaction-level lock: held until this connection's transaction ends.
                got = conn.execute(
                    sqlalchemy.text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": key}
                ).scalar()
                if got:
                    try:
                        yield True
                    finally:
                        with contextlib.suppress(Exception):  # a lost connection released it
                            conn.rollback()
                    return
                conn.rollback()
                created = ready is not None and ready(conn)
            finally:
                conn.close()
            if created:
                yield False
                return
            if time.monotonic() >= end:
                raise LockTimeout(f"advisory lock {key} stayed taken for {timeout_s:g} s")
            time.sleep(random.uniform(pause / 2, pause))
            pause = min(pause * 2, _MAX_POLL_S)
    finally:
        engine.dispose()


def lock_connect_args(url: str) -> dict[str, object]:
    """Driver arguments for PostgreSQL connections: a connect timeout, and no server-side
    prepared statements with psycopg 3 (PgBouncer in transaction pooling cannot keep them)."""
    import sqlalchemy

    args: dict[str, object] = {"connect_timeout": 10}
    if sqlalchemy.engine.make_url(url).get_driver_name() == "psycopg":
        args["prepare_threshold"] = None
    return args


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
