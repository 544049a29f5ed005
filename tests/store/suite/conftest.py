"""Storage backends as fixtures, reusable by any test that needs a study database.

``storage_url`` runs a test once per backend: a SQLite file, a journal file, and a database of
the real PostgreSQL server created for this test session (``dvt_hpo_test_<random>``, dropped
afterwards; skipped when no server answers unless ``DVT_HPO_REQUIRE_POSTGRES=1``).
``fresh_storage_url()`` returns a brand-new, empty database on every call (a new file, or a new
PostgreSQL database), for the races that only happen on a fresh database.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.store.suite.postgres_cluster import PostgresCluster, admin_engine

BACKENDS = ("sqlite", "journal", "postgresql")


def _create_database(server_url: str) -> str:
    import sqlalchemy

    name = f"dvt_hpo_test_{uuid.uuid4().hex[:12]}"
    engine = admin_engine(server_url)
    try:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    finally:
        engine.dispose()
    return sqlalchemy.engine.make_url(server_url).set(database=name).render_as_string(False)


def _drop_database(url: str) -> None:
    import sqlalchemy

    name = sqlalchemy.engine.make_url(url).database
    engine = admin_engine(url)
    try:
        with engine.connect() as conn:
            # WITH (FORCE) ends connections a killed worker may have left behind (PostgreSQL 13+).
            conn.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        engine.dispose()


@pytest.fixture(scope="session")
def postgres_database(postgres_url: str) -> Iterator[str]:
    """A database of its own for this test session on the real PostgreSQL server."""
    url = _create_database(postgres_url)
    yield url
    _drop_database(url)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def storage_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A study database URL, one test per backend (study names must be unique per test)."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path}/study.db"
    if backend == "journal":
        return f"journal:///{tmp_path}/study.log"
    return str(request.getfixturevalue("postgres_database"))


@pytest.fixture
def fresh_storage_url(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[[], str]]:
    """A factory of brand-new, empty databases of this test's backend."""
    created: list[str] = []

    def make() -> str:
        n = len(created)
        if backend == "sqlite":
            url = f"sqlite:///{tmp_path}/fresh-{n}/study.db"
        elif backend == "journal":
            url = f"journal:///{tmp_path}/fresh-{n}/study.log"
        else:
            url = _create_database(str(request.getfixturevalue("postgres_url")))
        created.append(url)
        return url

    yield make
    for url in created:
        if url.startswith("postgresql"):
            _drop_database(url)


@pytest.fixture(scope="module")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """A throwaway PostgreSQL server (password auth) that a test may stop and start."""
    cluster = PostgresCluster.create()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()
