"""How long ``dvt-hpo status`` takes on a study of 10,000 trials (goal: under 2 s).

Builds a SQLite study shaped like the runner's (user attrs with a per-epoch history, 5 epochs
of intermediate values; 80% complete, 15% pruned, 5% failed, 4 running) through Optuna's
``add_trials``, then times ``status`` as a subprocess (what a user waits for, interpreter start
included) and in-process (the reading alone), next to loading every trial
(``study.get_trials()``) for comparison. Optionally the same on PostgreSQL.

    python benchmarks/overheads/status_speed.py [--trials 10000] [--repeat 5] [--postgres URL]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import optuna
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from dvt_hpo.store.opening import StudyAt  # noqa: E402
from dvt_hpo.studyfile import load_spec  # noqa: E402
from dvt_hpo.views.status import read_status  # noqa: E402

DISTS = {
    "lr": FloatDistribution(1e-4, 1e-1, log=True),
    "width": CategoricalDistribution([16, 32, 64]),
}


def _trial(i: int, state: TrialState) -> optuna.trial.FrozenTrial:
    curve = [0.1 * (s + 1) + (i % 97) / 1000 for s in range(5)]
    start = datetime(2026, 1, 1) + timedelta(seconds=10 * i)
    attrs = {
        "host": f"gpu-{i % 4}",
        "batch_size": 256,
        "duration_s": 9.5,
        "epochs_reported": 5,
        "last_step": 4,
        "history": {"score": [[s, v] for s, v in enumerate(curve)]},
    }
    if state == TrialState.FAIL:
        attrs["reason"] = f"RuntimeError: trial {i} failed"
    trial = create_trial(
        state=state,
        value=curve[-1] if state == TrialState.COMPLETE else None,
        params={"lr": 10 ** (-4 + 3 * (i % 101) / 100), "width": (16, 32, 64)[i % 3]},
        distributions=DISTS,
        user_attrs=attrs,
        intermediate_values=dict(enumerate(curve)),
    )
    trial.datetime_start = start
    trial.datetime_complete = None if state == TrialState.RUNNING else start + timedelta(seconds=9)
    return trial


def build(folder: Path, n: int, storage: str | None) -> Path:
    path = folder / "study.yaml"
    doc = {
        "study": {"name": "status-speed", "n_trials": n}
        | ({"storage": storage} if storage else {}),
        "objective": {"metric": "score", "direction": "maximize"},
        "trainer": {"entrypoint": "tests.entrypoints.toy:run", "config": {"lr": 0.1, "w": 16}},
        "search_space": [
            {
                "name": "lr",
                "path": "lr",
                "new_key": True,
                "kind": "float",
                "low": 1e-4,
                "high": 0.1,
                "log": True,
            },
            {
                "name": "width",
                "path": "w",
                "new_key": True,
                "kind": "categorical",
                "choices": [16, 32, 64],
            },
        ],
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    spec = load_spec(path)
    if storage:
        optuna.delete_study(study_name="status-speed", storage=storage) if _exists(
            storage
        ) else None
    study = optuna.create_study(
        study_name="status-speed", storage=spec.study.storage, direction="maximize"
    )
    # add_trials commits trial by trial (minutes for 10,000 on a busy machine): write a base
    # of 100 through Optuna, then copy its rows in SQL, doubling, up to n - 4; 4 RUNNING last.
    base = min(100, n - 4)
    states = [
        TrialState.FAIL
        if i % 20 == 0
        else TrialState.PRUNED
        if i % 20 <= 3
        else TrialState.COMPLETE
        for i in range(base)
    ]
    began = time.perf_counter()
    study.add_trials([_trial(i, states[i]) for i in range(base)])
    _replicate(spec.study.storage, study._study_id, base, n - 4)
    study.add_trials([_trial(i, TrialState.RUNNING) for i in range(n - 4, n)])
    print(f"built {n} trials in {time.perf_counter() - began:.1f} s", file=sys.stderr)
    return path


_CHILDREN = {
    "trial_params": "param_name, param_value, distribution_json",
    "trial_values": "objective, value, value_type",
    "trial_user_attributes": "key, value_json",
    "trial_system_attributes": "key, value_json",
    "trial_intermediate_values": "step, intermediate_value, intermediate_value_type",
}


def _replicate(url: str, study_id: int, have: int, want: int) -> None:
    """Copy the study's trials (and their rows in every child table) until ``want`` exist."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url)
    with engine.begin() as conn:
        # Only for the copy's join; dropped after, so status is measured on Optuna's schema.
        conn.execute(sqlalchemy.text("CREATE INDEX bench_number ON trials (study_id, number)"))
        while have < want:
            k = min(have, want - have)
            args = {"sid": study_id, "off": have, "k": k}
            conn.execute(
                sqlalchemy.text(
                    "INSERT INTO trials (number, study_id, state, datetime_start, "
                    "datetime_complete) SELECT number + :off, study_id, state, datetime_start, "
                    "datetime_complete FROM trials WHERE study_id = :sid AND number < :k"
                ),
                args,
            )
            for table, columns in _CHILDREN.items():
                cols = ", ".join(f"c.{c.strip()}" for c in columns.split(","))
                conn.execute(
                    sqlalchemy.text(
                        f"INSERT INTO {table} (trial_id, {columns}) SELECT t2.trial_id, {cols} "
                        f"FROM {table} c JOIN trials t1 ON c.trial_id = t1.trial_id "
                        "JOIN trials t2 ON t2.study_id = t1.study_id "
                        "AND t2.number = t1.number + :off "
                        "WHERE t1.study_id = :sid AND t1.number < :k"
                    ),
                    args,
                )
            have += k
        conn.execute(sqlalchemy.text("DROP INDEX bench_number"))
    engine.dispose()


def _exists(storage: str) -> bool:
    return "status-speed" in optuna.get_all_study_names(storage=storage)


def _storage_and_id(spec):  # what `dvt-hpo status` opens, timed with the read
    opened = StudyAt.of(spec).load()
    return opened.storage, opened.study_id


def _time(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--postgres", default=None, help="also measure on this PostgreSQL URL")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    rows = []
    storages: list[tuple[str, str | None]] = [("SQLite", None)]
    if args.postgres:
        storages.append(("PostgreSQL", args.postgres))
    for label, storage in storages:
        with tempfile.TemporaryDirectory() as tmp:
            path = build(Path(tmp), args.trials, storage)
            spec = load_spec(path)
            cmd = [sys.executable, "-m", "dvt_hpo", "status", str(path)]
            sub = _time(
                lambda cmd=cmd: subprocess.run(cmd, check=True, capture_output=True, cwd=REPO),
                args.repeat,
            )
            inproc = _time(lambda spec=spec: read_status(*_storage_and_id(spec), spec), args.repeat)
            study = StudyAt.of(spec).load().study
            everything = _time(lambda study=study: study.get_trials(), args.repeat)
            rows.append((label, sub, inproc, everything))
            if storage:
                optuna.delete_study(study_name="status-speed", storage=storage)

    def fmt(times: list[float]) -> str:
        return f"{statistics.median(times):.2f} / {max(times):.2f}"

    print(f"\n{args.trials} trials, median / max of {args.repeat} runs, seconds\n")
    print("| storage | `dvt-hpo status` (subprocess) | status in-process | all trials loaded |")
    print("| --- | --- | --- | --- |")
    for label, sub, inproc, everything in rows:
        print(f"| {label} | {fmt(sub)} | {fmt(inproc)} | {fmt(everything)} |")


if __name__ == "__main__":
    main()
