"""Workers through PgBouncer in transaction pooling: the study finishes exactly, and the server
sees no more connections than PgBouncer's pool however many workers run."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy
import yaml

from dvt_hpo.store.opening import StudyAt
from tests.conftest import toy_study
from tests.store.suite.conftest import _create_database, _drop_database
from tests.store.suite.pgbouncer import pgbouncer
from tests.store.suite.postgres_cluster import admin_engine

POOL = 3
WORKERS = 6


@pytest.mark.processes
def test_workers_through_pgbouncer_finish_the_budget_on_a_few_server_connections(
    postgres_url: str, unique_name: str, tmp_path: Path
) -> None:
    database = _create_database(postgres_url)
    name = sqlalchemy.engine.make_url(database).database
    try:
        with pgbouncer(database, pool_size=POOL) as url:
            doc = toy_study(unique_name, study={"n_trials": 12, "storage": url})
            path = tmp_path / "study.yaml"
            path.write_text(yaml.safe_dump(doc, sort_keys=False))
            run = subprocess.Popen(
                [sys.executable, "-m", "dvt_hpo", "run", str(path), "--workers", str(WORKERS)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                cwd=tmp_path,
            )
            # The server's connections to this database, sampled while the workers run.
            peak = 0
            engine = admin_engine(postgres_url)
            try:
                with engine.connect() as conn:
                    while run.poll() is None:
                        count = conn.execute(
                            sqlalchemy.text(
                                "SELECT count(*) FROM pg_stat_activity WHERE datname = :db"
                            ),
                            {"db": name},
                        ).scalar()
                        peak = max(peak, int(count or 0))
                        time.sleep(0.05)
            finally:
                engine.dispose()
            out = run.stdout.read() if run.stdout else ""
            assert run.returncode == 0, out
            study = optuna.load_study(study_name=unique_name, storage=url)
            states = [t.state for t in study.get_trials(deepcopy=False)]
            assert states.count(optuna.trial.TrialState.COMPLETE) == 12, out
            assert optuna.trial.TrialState.RUNNING not in states
            assert 0 < peak <= POOL, f"{peak} server connections for {WORKERS} workers"
    finally:
        _drop_database(database)


@pytest.mark.processes
def test_a_worker_loads_a_study_on_one_server_connection_at_a_time(
    postgres_url: str, unique_name: str
) -> None:
    # Loading must never hold one server connection while it waits for another: behind a pool
    # of N, N workers loading at the same instant would each hold one and wait forever (Optuna's
    # own schema check does, and hung a CI run of the test above).
    database = _create_database(postgres_url)
    try:
        StudyAt(database, unique_name).create_or_load(["maximize"])
        with pgbouncer(database, pool_size=1) as url:
            code = (
                "import sys; from dvt_hpo.store.opening import StudyAt; "
                "print(len(StudyAt(sys.argv[1], sys.argv[2]).create_or_load(['maximize'])"
                ".study.trials))"
            )
            loaded = subprocess.run(
                [sys.executable, "-c", code, url, unique_name],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert loaded.returncode == 0, loaded.stderr
            assert loaded.stdout.strip() == "0"
    finally:
        _drop_database(database)
