"""Many orchestrators on one PostgreSQL server with ``max_connections = 100``: do they finish
the exact budget without an error, and how many server connections do they hold at the peak?

Starts a throwaway PostgreSQL server (initdb under /tmp, ``max_connections=100``; the shared
server is never touched), then for each row: a fresh database, N ``dvt-hpo run`` processes
started at the same instant on one study of no-op trials (``benchmarks/overheads/noop_entrypoint.py``,
``2 * N`` trials), directly or through PgBouncer (Debian's, transaction pooling). The server's
connections are sampled every 50 ms from ``pg_stat_activity``.

    python benchmarks/overheads/many_workers.py [--workers 48,128] [--pgbouncer] [--pool 20]
        [--max-connections 100]

Heavy: N Python processes at once (about 60 MB each).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import optuna
import sqlalchemy
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.store.suite.pgbouncer import pgbouncer  # noqa: E402
from tests.store.suite.postgres_cluster import PostgresCluster, admin_engine  # noqa: E402


def study_doc(name: str, url: str, n_trials: int) -> dict:
    return {
        "study": {
            "name": name,
            "storage": url,
            "n_trials": n_trials,
            "sampler": {"kind": "random", "seed": 0},
            "pruner": "none",
            # N Python processes on a few cores fall far behind 10 s heartbeats: longer ones
            # keep live trials from being taken for dead (and retried) by the other workers.
            "heartbeat_interval_s": 30,
            "grace_period_s": 600,
        },
        "objective": {"metric": "score", "direction": "maximize"},
        "trials": {"warm": False, "keep_logs": "none"},
        "trainer": {"entrypoint": "noop_entrypoint:run", "config": {}},
        "search_space": [
            {"name": "x", "path": "x", "new_key": True, "kind": "float", "low": 0.0, "high": 1.0}
        ],
    }


def sample_connections(
    server_url: str, database: str, stop: threading.Event, peak: list[int]
) -> None:
    engine = admin_engine(server_url)
    with engine.connect() as conn:
        while not stop.is_set():
            count = conn.execute(
                sqlalchemy.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = :db "
                    "AND pid <> pg_backend_pid()"
                ),
                {"db": database},
            ).scalar()
            peak[0] = max(peak[0], int(count or 0))
            time.sleep(0.05)
    engine.dispose()


def one_row(server: PostgresCluster, n: int, pooled: bool, pool: int, folder: Path) -> list[str]:
    database = f"many_{n}_{'pgb' if pooled else 'direct'}"
    engine = admin_engine(server.url)
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{database}"'))
        conn.execute(sqlalchemy.text(f'CREATE DATABASE "{database}"'))
    engine.dispose()
    direct = server.url_for(database)
    study_dir = folder / database
    study_dir.mkdir()
    (study_dir / "noop_entrypoint.py").write_text(
        (REPO / "benchmarks" / "overheads" / "noop_entrypoint.py").read_text()
    )

    def run(url: str) -> list[str]:
        path = study_dir / "study.yaml"
        path.write_text(yaml.safe_dump(study_doc("many", url, 2 * n), sort_keys=False))
        stop, peak = threading.Event(), [0]
        sampler = threading.Thread(
            target=sample_connections, args=(server.url, database, stop, peak)
        )
        sampler.start()
        start = time.monotonic()
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "dvt_hpo", "run", str(path)],
                cwd=study_dir,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(n)
        ]
        errors = [(p.wait(), p.stderr.read() if p.stderr else "") for p in procs]
        wall = time.monotonic() - start
        stop.set()
        sampler.join()
        bad = [
            (code, err.strip().splitlines()[-1] if err.strip() else "")
            for code, err in errors
            if code
        ]
        study = optuna.load_study(study_name="many", storage=direct)
        states = [t.state.name for t in study.get_trials(deepcopy=False)]
        first_error = bad[0][1][:120] if bad else ""
        return [
            str(n),
            "PgBouncer" if pooled else "direct",
            str(2 * n),
            str(states.count("COMPLETE")),
            str(states.count("RUNNING")),
            str(len(bad)),
            str(peak[0]),
            f"{wall:.0f}",
            first_error,
        ]

    if pooled:
        with pgbouncer(direct, pool_size=pool) as url:
            return run(url)
    return run(direct)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="48,128", help="orchestrator counts, comma-separated")
    parser.add_argument("--pgbouncer", action="store_true", help="also through PgBouncer")
    parser.add_argument("--pool", type=int, default=20, help="PgBouncer's server connections")
    parser.add_argument("--max-connections", type=int, default=100, help="the server's")
    args = parser.parse_args()
    server = PostgresCluster.create()
    server.start(max_connections=args.max_connections)
    try:
        engine = admin_engine(server.url)
        with engine.connect() as conn:
            shown = conn.execute(sqlalchemy.text("SHOW max_connections")).scalar()
        engine.dispose()
        print(f"PostgreSQL on port {server.port}, max_connections = {shown}")
        print(
            "| orchestrators | via | budget | complete | running | exits ≠ 0 | peak connections | wall s | first error |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        with tempfile.TemporaryDirectory() as tmp:
            for n in (int(x) for x in args.workers.split(",")):
                for pooled in (False, True) if args.pgbouncer else (False,):
                    print(
                        "| " + " | ".join(one_row(server, n, pooled, args.pool, Path(tmp))) + " |",
                        flush=True,
                    )
    finally:
        server.destroy()


if __name__ == "__main__":
    main()
