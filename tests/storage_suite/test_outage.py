"""A real PostgreSQL server goes away and comes back (a throwaway cluster this module starts)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

import optuna
import pytest

from dvt_hpo.storage import HeartbeatSettings, create_or_load_study
from dvt_hpo.storage_errors import StorageError, with_retry
from tests.storage_suite.postgres_cluster import PASSWORD, PostgresCluster

T = TypeVar("T")
OUTAGE_S = 10

pytestmark = pytest.mark.processes


def _study(cluster: PostgresCluster, name: str) -> optuna.Study:
    return create_or_load_study(
        cluster.url, name, ["maximize"], heartbeat=HeartbeatSettings(1, 60, 1)
    )


def test_storage_calls_ride_out_a_server_restart(postgres_cluster: PostgresCluster) -> None:
    study = _study(postgres_cluster, "restart")
    storage = study._storage
    trial = study.ask()
    trial.report(0.1, 0)
    retries: list[float] = []

    def retry(fn: Callable[[], T], what: str) -> T:
        return with_retry(
            fn,
            retry_s=60,
            what=what,
            url=postgres_cluster.url,
            on_retry=lambda exc, waited: retries.append(waited),
        )

    postgres_cluster.stop()
    restart = threading.Timer(OUTAGE_S, postgres_cluster.start)
    restart.start()
    try:
        started = time.monotonic()
        retry(lambda: trial.report(0.5, 1), "report")
        outage = time.monotonic() - started
        retry(trial.should_prune, "should_prune")
        retry(lambda: storage.record_heartbeat(trial._trial_id), "heartbeat")
        retry(lambda: study.tell(trial, 0.9), "tell")
        second = retry(study.ask, "ask")
        retry(lambda: study.tell(second, 0.3), "tell")
    finally:
        restart.join()
    assert OUTAGE_S - 1 < outage < OUTAGE_S + 10
    assert len(retries) >= 5  # backoff: 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 4 s...
    trials = study.get_trials(deepcopy=False)
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    assert trials[0].intermediate_values == {0: 0.1, 1: 0.5}
    assert study.best_value == 0.9


def test_a_longer_outage_ends_with_one_line(postgres_cluster: PostgresCluster) -> None:
    study = _study(postgres_cluster, "longer")
    trial = study.ask()
    postgres_cluster.stop()
    try:
        started = time.monotonic()
        with pytest.raises(StorageError) as info:
            with_retry(
                lambda: trial.report(0.5, 0), retry_s=3, what="report", url=postgres_cluster.url
            )
        assert 3 <= time.monotonic() - started < 8
    finally:
        postgres_cluster.start()
    message = str(info.value)
    assert "\n" not in message and PASSWORD not in message
    assert "report failed: the database stayed unreachable for 3 s" in message
    assert "cannot connect to the database server" in message
    # The trial is still there, RUNNING, for the heartbeat rule to fail and retry later.
    assert study.trials[0].state.name == "RUNNING"


def test_authentication_failure_is_one_line(postgres_cluster: PostgresCluster) -> None:
    url = postgres_cluster.url_for("postgres", password="not-the-password")
    with pytest.raises(StorageError) as info:
        create_or_load_study(url, "auth", ["maximize"])
    message = str(info.value)
    assert "\n" not in message and "not-the-password" not in message
    assert "authentication failed" in message and "postgres:***@" in message
    assert "password" in info.value.hint


def test_missing_password_is_one_line(postgres_cluster: PostgresCluster) -> None:
    url = f"postgresql://postgres@127.0.0.1:{postgres_cluster.port}/postgres"
    with pytest.raises(StorageError, match="the server wants a password and the URL has none"):
        create_or_load_study(url, "auth", ["maximize"])


def test_pooled_connections_are_renewed_after_a_restart(
    postgres_cluster: PostgresCluster,
) -> None:
    # pool_pre_ping: the first call after a restart gets a new connection instead of failing
    # on the dead pooled one, without any retry.
    study = _study(postgres_cluster, "pre-ping")
    study.tell(study.ask(), 0.5)
    postgres_cluster.stop()
    postgres_cluster.start()
    study.tell(study.ask(), 0.7)
    assert len(study.trials) == 2
