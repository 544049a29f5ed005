"""Does the cost per trial stay flat on a PostgreSQL study of 20,000 trials?

For each sampler of ``--samplers`` (default: the study's default, then TPE), runs W no-op
trials (the toy entry point, one report, no pruner) with one worker, parallel 1, on a fresh
PostgreSQL study, then W more on the same kind of study already holding N finished trials
(built the way ``benchmarks/overheads/status_speed.py`` builds its studies: 100 through Optuna, then
copied in SQL), and prints the median start-to-start interval of each run and their ratio
(goal: <= 1.10), then ``dvt-hpo status`` on the large study (goal: <= 2 s, interpreter start
included). Running the N trials one by one would take hours here; the trials already stored
are what a late trial's cost could grow with. A sampler's ask grows with the trials it reads
(TPE's with every one): ``random`` is the floor of the orchestrator's own cost;
``benchmarks/overheads/sampler_scale.py`` measures the samplers' CPU on studies of long curves.

    python benchmarks/overheads/long_study.py --postgres postgresql://postgres@127.0.0.1:5432/test \\
        [--trials 20000] [--window 200] [--samplers default,tpe,random]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import sqlalchemy
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks" / "overheads"))

from status_speed import build  # noqa: E402

from dvt_hpo import run_study  # noqa: E402


def start_to_start(path: Path, window: int, sampler: str) -> tuple[float, float]:
    """Run ``window`` more trials of the study file at ``path`` with ``sampler`` (a kind, or
    ``default``: the file names none): the median interval between the starts of consecutive
    new trials, and the seconds from the run's start to its first trial's (the worker's
    one-time cost of joining the study)."""
    doc = yaml.safe_load(path.read_text())
    name, url = doc["study"]["name"], doc["study"]["storage"]
    before = len(optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False))
    doc["study"]["n_trials"] = before + window
    doc["study"]["sampler"] = {"seed": 0} | ({} if sampler == "default" else {"kind": sampler})
    doc["study"]["pruner"] = "none"
    doc["trainer"] = {"entrypoint": "tests.entrypoints.toy:run", "config": {"curve": [0.5]}}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    began = time.time()
    study = run_study(path, out=lambda line: None)
    new = sorted(
        (t for t in study.get_trials(deepcopy=False) if t.number >= before),
        key=lambda t: t.datetime_start,
    )
    starts = [t.datetime_start.timestamp() for t in new]
    median = statistics.median(b - a for a, b in zip(starts, starts[1:], strict=False))
    return median, starts[0] - began


def main() -> None:
    # Trial processes import the toy entry point from the repository.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", required=True, help="a PostgreSQL URL (a database of it)")
    parser.add_argument("--trials", type=int, default=20_000)
    parser.add_argument("--window", type=int, default=200)
    parser.add_argument("--samplers", default="default,tpe", help="kinds, comma-separated")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    print(
        f"| sampler | stored trials | median start-to-start of {args.window} new trials "
        "| first trial after | late / early |"
    )
    print("| --- | --- | --- | --- | --- |")
    statuses: list[float] = []
    for sampler in args.samplers.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            small = Path(tmp) / "small"
            small.mkdir()
            path = build(small, 5, args.postgres)  # a fresh study (5 stored trials)
            _finish_running(args.postgres)
            early, joined = start_to_start(path, args.window, sampler)
            print(f"| {sampler} | ~0 | {early:.3f} s | {joined:.1f} s | |", flush=True)
            large = Path(tmp) / "large"
            large.mkdir()
            path = build(large, args.trials, args.postgres)
            _finish_running(args.postgres)
            late, joined = start_to_start(path, args.window, sampler)
            print(
                f"| {sampler} | {args.trials} | {late:.3f} s | {joined:.1f} s "
                f"| {late / early:.2f} |",
                flush=True,
            )
            began = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "dvt_hpo", "status", str(path)],
                capture_output=True,
                text=True,
                cwd=REPO,
            )
            status_s = time.perf_counter() - began
            assert done.returncode == 0, done.stderr
            statuses.append(status_s)
    print(
        f"dvt-hpo status on {args.trials + args.window} trials: {max(statuses):.2f} s (goal <= 2 s)"
    )


def _finish_running(url: str) -> None:
    """The built studies end with 4 RUNNING trials (for status); here they would be waited on
    as another worker's: mark them failed."""
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            sqlalchemy.text(
                "UPDATE trials SET state = 'FAIL', datetime_complete = now() "
                "WHERE state = 'RUNNING' AND study_id IN "
                "(SELECT study_id FROM studies WHERE study_name = 'status-speed')"
            )
        )
    engine.dispose()


if __name__ == "__main__":
    main()
