"""A real PostgreSQL server goes away and comes back (a throwaway cluster this module starts)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

import optuna
import pytest
import sqlalchemy

from dvt_hpo.exceptions import StorageError
from dvt_hpo.store.errors import with_retry
from dvt_hpo.store.opening import StudyAt
from dvt_hpo.store.storage import HeartbeatSettings
from tests.store.suite.postgres_cluster import PASSWORD, PostgresCluster

T = TypeVar("T")
OUTAGE_S = 10

pytestmark = pytest.mark.processes


def _study(cluster: PostgresCluster, name: str) -> optuna.Study:
    opened = StudyAt(cluster.url, name).create_or_load(
        ["maximize"], heartbeat=HeartbeatSettings(1, 60, 1)
    )
    return opened.study


def test_storage_calls_ride_out_a_server_restart(postgres_cluster: PostgresCluster) -> None:
    study = _study(postgres_cluster, "restart")
    storage = study._storage
    trial = study.ask()
    trial.report(0.1, 0)
    # Each failed attempt: whether the server was back (accepting connections) by then.
    retries: list[bool] = []
    restarting, back = threading.Event(), threading.Event()

    def retry(fn: Callable[[], T], what: str) -> T:
        return with_retry(
            fn,
            retry_s=60,
            what=what,
            url=postgres_cluster.url,
            on_retry=lambda exc, waited: retries.append(back.is_set()),
        )

    def restart_server() -> None:
        restarting.set()
        postgres_cluster.start()
        back.set()

    postgres_cluster.stop()
    restart = threading.Timer(OUTAGE_S, restart_server)
    restart.start()
    try:
        retry(lambda: trial.report(0.5, 1), "report")
        # The report waited out the outage: it succeeded only once the server was started again.
        assert restarting.is_set()
        retry(trial.should_prune, "should_prune")
        retry(lambda: storage.record_heartbeat(trial._trial_id), "heartbeat")
        retry(lambda: study.tell(trial, 0.9), "tell")
        second = retry(study.ask, "ask")
        retry(lambda: study.tell(second, 0.3), "tell")
    finally:
        restart.join()
    # Retried through the outage (backoff 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 4 s... in OUTAGE_S),
    # and once the server was back (pg_ctl -w returned), at most the attempt then under way
    # failed: the next one went through.
    during, after = retries.count(False), retries.count(True)
    assert during >= 5 and after <= 1, retries
    trials = study.get_trials(deepcopy=False)
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    assert trials[0].intermediate_values == {0: 0.1, 1: 0.5}
    assert study.best_value == 0.9


def test_a_longer_outage_ends_with_one_line(postgres_cluster: PostgresCluster) -> None:
    study = _study(postgres_cluster, "longer")
    trial = study.ask()
    # The attempts are real (a stopped server); their time is counted on a clock that only
    # the backoff's pauses advance, so that when it gives up does not depend on the load.
    now = [0.0]
    waits: list[float] = []

    def pause(seconds: float) -> None:
        now[0] += seconds

    postgres_cluster.stop()
    try:
        with pytest.raises(StorageError) as info:
            with_retry(
                lambda: trial.report(0.5, 0),
                retry_s=3,
                what="report",
                url=postgres_cluster.url,
                on_retry=lambda exc, waited: waits.append(waited),
                clock=lambda: now[0],
                sleep=pause,
            )
    finally:
        postgres_cluster.start()
    # Retried with backoff until 3 s had passed, then gave up: no attempt after that.
    assert waits == pytest.approx([0.0, 0.1, 0.3, 0.7, 1.5]) and now[0] == pytest.approx(3.0)
    message = str(info.value)
    assert "\n" not in message and PASSWORD not in message
    assert "report failed: the database stayed unreachable for 3 s" in message
    assert "cannot connect to the database server" in message
    # The trial is still there, RUNNING, for the heartbeat rule to fail and retry later.
    assert study.trials[0].state.name == "RUNNING"


def test_authentication_failure_is_one_line(postgres_cluster: PostgresCluster) -> None:
    url = postgres_cluster.url_for("postgres", password="not-the-password")
    with pytest.raises(StorageError) as info:
        StudyAt(url, "auth").create_or_load(["maximize"])
    message = str(info.value)
    assert "\n" not in message and "not-the-password" not in message
    assert "authentication failed" in message and "postgres:***@" in message
    assert "password" in info.value.hint


def test_missing_password_is_one_line(postgres_cluster: PostgresCluster) -> None:
    url = f"postgresql://postgres@127.0.0.1:{postgres_cluster.port}/postgres"
    with pytest.raises(StorageError, match="the server wants a password and the URL has none"):
        StudyAt(url, "auth").create_or_load(["maximize"])


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


def test_a_study_rides_out_a_server_restart_and_loses_no_trial(
    postgres_cluster: PostgresCluster, write_study: Callable[..., object]
) -> None:
    """``dvt-hpo run`` while the server stops mid-study, until the run has met the outage: the
    running trial keeps training, its reports wait, and every trial completes; exit 0."""
    from tests.conftest import toy_study
    from tests.orchestrator import Orchestrator

    name = "outage-study"
    doc = toy_study(name, study={"storage": postgres_cluster.url, "n_trials": 3})
    doc["study"]["grace_period_s"] = 60
    values = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    doc["trainer"]["config"] = {"actions": [{"do": "curve", "values": values, "sleep_s": 1.0}]}
    run = Orchestrator(write_study(doc))  # type: ignore[arg-type]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the study lives in the database: poll it
        time.sleep(0.2)
        try:
            study = optuna.load_study(study_name=name, storage=postgres_cluster.url)
        except KeyError:
            continue
        if any(t.intermediate_values for t in study.get_trials(deepcopy=False)):
            break
    else:
        raise AssertionError(f"no trial reported within 60 s:\n{run.output()}")
    postgres_cluster.stop()
    # The outage lasts until the run has met it (a report or heartbeat failed and is retried).
    run.wait_line("database unreachable", timeout_s=60)
    postgres_cluster.start()
    code, out = run.finish(timeout_s=180)
    assert code == 0, out
    assert "database unreachable" in out and "database reachable again" in out, out
    study = optuna.load_study(study_name=name, storage=postgres_cluster.url)
    trials = study.get_trials(deepcopy=False)
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3, out
    assert all(len(t.intermediate_values) == 6 for t in trials)


# 60 s failed a live trial as stale once the server was back (a worker whose only storage calls
# during the outage were its heartbeat thread's never knew of it); both lengths are the issue's.
@pytest.mark.parametrize("outage_s", [20, 60])
def test_resumable_trials_of_four_workers_ride_out_an_outage(
    postgres_cluster: PostgresCluster, write_study: Callable[..., object], outage_s: int
) -> None:
    """The server stopped for ``outage_s`` mid-study under 4 workers of resumable trials
    (``trials.resume``, a state saved after every epoch): nothing lost, no epoch trained twice,
    every value that of an uninterrupted run; each worker exits 0, or 1 with one line and a
    rerun finishes the study."""
    from tests.conftest import toy_study
    from tests.lost_nothing import problems
    from tests.orchestrator import Orchestrator

    name = f"outage-resume-{outage_s}"
    epochs = 6
    doc = toy_study(name, study={"storage": postgres_cluster.url, "n_trials": 8})
    doc["objective"] = {"metric": "score", "direction": "maximize", "reduce": "last"}
    doc["trials"].update({"resume": True, "resume_every_s": 0, "warm": False, "timeout_s": 300})
    doc["trainer"] = {
        "entrypoint": "tests.entrypoints.resumable:counter",
        "config": {"epochs": epochs, "sleep_s": 1.0},
    }
    path = write_study(doc)
    workers = [Orchestrator(path) for _ in range(4)]  # type: ignore[arg-type]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # the study lives in the database: poll it
        time.sleep(0.2)
        try:
            study = optuna.load_study(study_name=name, storage=postgres_cluster.url)
        except (KeyError, sqlalchemy.exc.IntegrityError):
            # Not created yet, or this poll's RDBStorage created the tables at the same instant
            # as the workers (PostgreSQL's catalog refuses one of two equal CREATE TYPEs).
            continue
        if sum(bool(t.intermediate_values) for t in study.get_trials(deepcopy=False)) >= 4:
            break
    else:
        raise AssertionError(f"4 trials did not report within 90 s:\n{workers[0].output()}")
    postgres_cluster.stop()
    time.sleep(outage_s)  # the outage itself is the time under test
    postgres_cluster.start()
    codes = [w.finish(timeout_s=300) for w in workers]
    for code, out in codes:
        assert code == 0 or (code == 1 and out.strip().splitlines()[-1].startswith("error")), out
    if any(code for code, _ in codes):
        rerun = Orchestrator(path)  # type: ignore[arg-type]
        code, out = rerun.finish(timeout_s=300)
        assert code == 0, out
    trials = optuna.load_study(study_name=name, storage=postgres_cluster.url).trials
    assert problems(trials, 8) == [], [(t.number, t.state.name, t.user_attrs) for t in trials]
    outputs = "\n".join(f"--- worker {i}\n{out}" for i, (_, out) in enumerate(codes))
    for t in trials:
        assert not t.user_attrs.get("redone_epochs"), (t.user_attrs, outputs)
        if t.state.name == "COMPLETE":
            value = 0.0
            for _ in range(epochs):
                value = value * 0.5 + t.params["x"]
            assert t.value == value and len(t.intermediate_values) == epochs
