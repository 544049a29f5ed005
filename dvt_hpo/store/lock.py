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
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
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
def folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``folder`` (created if missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@contextlib.contextmanager
def _advisory_lock(url: str, timeout_s: float) -> Iterator[None]:
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    engine = sqlalchemy.create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": 10})
    try:
        with engine.connect() as conn:
            # lock_timeout bounds the wait for the advisory lock too; SET takes no parameters.
            conn.execute(sqlalchemy.text(f"SET lock_timeout = {int(timeout_s * 1000)}"))
            conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": ADVISORY_KEY})
            conn.commit()  # a session-level lock outlives the transaction; end it
            try:
                yield
            finally:
                with contextlib.suppress(Exception):  # a lost connection released it already
                    conn.execute(
                        sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": ADVISORY_KEY}
                    )
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
