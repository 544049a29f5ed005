"""Study throughput: trials per second of ``dvt-hpo run`` next to plain Optuna, per storage.

    python benchmarks/overheads/study_throughput.py                        # 1,000 trials per run
    python benchmarks/overheads/study_throughput.py --trials 100           # a quick check
    python benchmarks/overheads/study_throughput.py --backends sqlite --workers 1
    python benchmarks/overheads/study_throughput.py --postgres postgresql://user@host/db

For each storage (SQLite file, journal file, PostgreSQL when reachable) and each worker count
(1 and 4), a fresh study of ``--trials`` trials runs twice on the same storage:

- **ours**: that many ``python -m dvt_hpo run study.yaml`` processes at once (parallel 1 each),
  on ``benchmarks/overheads/noop_entrypoint.py`` (a trainer that returns at once): every trial is a real
  ``python -m dvt_hpo.trial`` process, so this is the orchestration cost per trial;
- **optuna**: that many processes running plain ``study.optimize`` with a trivial objective
  (same opener, so the same SQLite settings), i.e. Optuna's own cost per trial.

Trials per second are counted from the study database (first trial start to last trial end).
For our runs the median start-to-start interval of consecutive trials is compared between the first
and the last 100 trials (a quarter of them with fewer than 400): a cost per trial that grows with
the study's size shows as a last/first ratio above 1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
try:
    import dvt_hpo  # noqa: F401
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(REPO_ROOT))

import yaml  # noqa: E402

from dvt_hpo.store.opening import StudyAt  # noqa: E402
from dvt_hpo.store.storage import unreachable_reason  # noqa: E402
from dvt_hpo.text.redact import redact_url  # noqa: E402

DEFAULT_POSTGRES = os.environ.get(
    "DVT_HPO_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
PLAIN_OPTUNA = """
import sys, optuna
from dvt_hpo.store.opening import StudyAt
optuna.logging.set_verbosity(optuna.logging.WARNING)
url, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
study = StudyAt(url, name).create_or_load(["maximize"]).study
study.optimize(lambda t: t.suggest_float("x", 0.0, 1.0), n_trials=n)
"""


@dataclass(frozen=True)
class Timing:
    trials: int
    trials_per_s: float
    first_interval_s: float | None = None
    last_interval_s: float | None = None


@dataclass(frozen=True)
class Row:
    storage: str
    workers: int
    ours: Timing
    optuna: Timing


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE), str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])]
    )
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _wait_all(procs: list[subprocess.Popen[str]], what: str) -> None:
    for proc in procs:
        out, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"{what} failed (exit {proc.returncode}):\n{out[-2000:]}")


def _timing(url: str, name: str, *, intervals: bool) -> Timing:
    """The study's timing; then the study is deleted (a shared PostgreSQL stays clean)."""
    import optuna

    study = StudyAt(url, name).load().study
    trials = [
        t
        for t in study.get_trials(deepcopy=False)
        if t.state.name == "COMPLETE" and t.datetime_start and t.datetime_complete
    ]
    starts = sorted(t.datetime_start.timestamp() for t in trials)  # type: ignore[union-attr]
    end = max(t.datetime_complete.timestamp() for t in trials)  # type: ignore[union-attr]
    rate = len(trials) / (end - starts[0]) if end > starts[0] else float("nan")
    optuna.delete_study(study_name=name, storage=study._storage)
    if not intervals or len(starts) < 8:
        return Timing(len(trials), rate)
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    k = min(100, len(gaps) // 4)
    # Medians: the first interval also holds one-time costs (the warm template's imports).
    return Timing(len(trials), rate, statistics.median(gaps[:k]), statistics.median(gaps[-k:]))


def run_ours(url: str, workers: int, trials: int, folder: Path) -> Timing:
    name = f"ours-{uuid.uuid4().hex[:8]}"
    doc: dict[str, Any] = {
        "study": {
            "name": name,
            "storage": url,
            "n_trials": trials,
            "sampler": {"kind": "random", "seed": 0},
            "pruner": {"kind": "none"},
        },
        "objective": {"metric": "score", "direction": "maximize"},
        "trials": {"parallel": 1, "devices": "cpu", "runs_dir": str(folder / name)},
        "trainer": {"entrypoint": "noop_entrypoint:run", "config": {}},
        "search_space": [
            {"name": "x", "path": "x", "new_key": True, "kind": "float", "low": 0.0, "high": 1.0}
        ],
    }
    study_file = folder / f"{name}.yaml"
    study_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "dvt_hpo", "run", str(study_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(),
            cwd=folder,
        )
        for _ in range(workers)
    ]
    _wait_all(procs, "dvt-hpo run")
    return _timing(url, name, intervals=True)


def run_optuna(url: str, workers: int, trials: int) -> Timing:
    name = f"optuna-{uuid.uuid4().hex[:8]}"
    shares = [trials // workers + (1 if i < trials % workers else 0) for i in range(workers)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PLAIN_OPTUNA, url, name, str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(),
        )
        for n in shares
    ]
    _wait_all(procs, "plain Optuna")
    return _timing(url, name, intervals=False)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f}"


def print_table(rows: list[Row], trials: int) -> None:
    print(f"\n{trials} trials per run, no-op trainer; trials/s from the study database\n")
    print(
        "| storage | workers | dvt-hpo trials/s | Optuna optimize trials/s | "
        "dvt-hpo start-to-start, first / last (ms) | last / first |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        first, last = r.ours.first_interval_s, r.ours.last_interval_s
        ratio = f"{last / first:.2f}" if first and last else "-"
        print(
            f"| {r.storage} | {r.workers} | {r.ours.trials_per_s:.2f} | "
            f"{r.optuna.trials_per_s:.1f} | {_ms(first)} / {_ms(last)} | {ratio} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000, help="trials per run (1000)")
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 4], help="worker counts (1 4)"
    )
    parser.add_argument(
        "--backends",
        nargs="+",
        default=["sqlite", "journal", "postgresql"],
        choices=["sqlite", "journal", "postgresql"],
    )
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="PostgreSQL URL to use")
    args = parser.parse_args(argv)

    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="dvt-hpo-throughput-") as tmp:
        folder = Path(tmp)
        for backend in args.backends:
            for workers in args.workers:
                sub = folder / f"{backend}-{workers}"
                sub.mkdir()
                if backend == "sqlite":
                    url = f"sqlite:///{sub}/study.db"
                elif backend == "journal":
                    url = f"journal:///{sub}/study.log"
                else:
                    why = unreachable_reason(args.postgres)
                    if why is not None:
                        print(f"PostgreSQL skipped: {redact_url(args.postgres)}: {why}")
                        break
                    url = args.postgres
                started = time.monotonic()
                ours = run_ours(url, workers, args.trials, sub)
                plain = run_optuna(url, workers, args.trials)
                rows.append(Row(backend, workers, ours, plain))
                print(
                    f"{backend}, {workers} worker(s): {ours.trials_per_s:.2f} vs "
                    f"{plain.trials_per_s:.1f} trials/s ({time.monotonic() - started:.0f} s)",
                    flush=True,
                )
    print_table(rows, args.trials)
    return 0


if __name__ == "__main__":
    sys.exit(main())
