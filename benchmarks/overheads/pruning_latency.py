"""Pruning latency of a real study: how fast a report gets its decision, and how fast a pruned
trial's processes are gone.

    python benchmarks/overheads/pruning_latency.py                 # SQLite, then PostgreSQL if reachable
    python benchmarks/overheads/pruning_latency.py --trials 40 --steps 30 --parallel 2
    python benchmarks/overheads/pruning_latency.py --postgres postgresql://user@host/db
    python benchmarks/overheads/pruning_latency.py --no-postgres
    python benchmarks/overheads/pruning_latency.py --pruner wilcoxon --no-postgres   # and optuna-wilcoxon

A study runs through :func:`dvt_hpo.run.runner.study_runner` (the same code as ``dvt-hpo run``),
one ``python -m dvt_hpo.trial`` process per trial, on ``benchmarks/overheads/latency_entrypoint.py``:
each trial reports ``--steps`` values of a curve that rises with its sampled ``x``, and a median
pruner prunes the weaker ones. ``--pruner wilcoxon`` uses dvt-hpo's default pruner instead, on
curves rounded to multiples of 1/200 (an accuracy on 200 validation images: ties and zeros);
``optuna-wilcoxon`` the same with Optuna's own ``WilcoxonPruner``, whose scipy test
:mod:`dvt_hpo.sampling.wilcoxon` replaces. Measured:

- **report -> decision, trial side**: from the trial's ``ctx.report`` call to its receipt of the
  decision (JSON over the AF_UNIX control socket, the orchestrator's handling, the reply).
- **decision, orchestrator**: ``TimedTrialRun.decision_times``, from the report's arrival to the
  decision, i.e. Optuna's ``trial.report`` + ``should_prune`` on the storage.
- **decision -> exited**: from the orchestrator's prune decision until every process that said
  hello has exited, watched from outside through pidfds (``process_tree.wait_gone``).
- **decision -> gone**: until ``TrialProcess`` saw the whole process group gone (its
  ``gone_s``: after the leader exited and the rest of its group was killed and awaited).

Goals: report -> decision under 50 ms (p95, trial side); decision -> gone under 1 s (max).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
try:
    import dvt_hpo  # noqa: F401
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(REPO_ROOT))

import optuna  # noqa: E402
import yaml  # noqa: E402

from dvt_hpo.process import tree as process_tree  # noqa: E402
from dvt_hpo.run.runner import study_runner as make_study_runner  # noqa: E402
from dvt_hpo.sampling import kinds as sampling_kinds  # noqa: E402
from dvt_hpo.sampling import optuna_factory  # noqa: E402
from dvt_hpo.store.storage import unreachable_reason  # noqa: E402
from dvt_hpo.study import starter as study_starter  # noqa: E402
from dvt_hpo.study import trial_run  # noqa: E402
from dvt_hpo.studyfile import load_spec  # noqa: E402
from dvt_hpo.text.redact import redact_url  # noqa: E402
from dvt_hpo.wire.protocol import Hello  # noqa: E402

DEFAULT_POSTGRES = os.environ.get(
    "DVT_HPO_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REPORT_GOAL_S = 0.050
PRUNERS: dict[str, dict[str, Any]] = {
    "median": {"kind": "median", "n_startup_trials": 3, "n_warmup_steps": 3},
    "wilcoxon": {"kind": "wilcoxon"},
    "optuna-wilcoxon": {"kind": "wilcoxon"},
}
GONE_GOAL_S = 1.0


class TimedTrialRun(trial_run.TrialRun):
    """A TrialRun that also notes the ranks' pids, the moment it decided to prune, and when
    those pids had all exited (watched from outside, through pidfds)."""

    instances: list[TimedTrialRun] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pids: list[int] = []
        self.prune_decided_s: float | None = None
        self.exited_outside_s: float | None = None
        self.decision_times: list[float] = []
        TimedTrialRun.instances.append(self)

    def on_hello(self, hello: Hello) -> None:
        self.pids.append(hello.pid)
        super().on_hello(hello)

    def on_report(self, step: int, metrics: dict[str, float]) -> bool:
        received = time.perf_counter()
        prune = super().on_report(step, metrics)
        self.decision_times.append(time.perf_counter() - received)
        if prune and self.prune_decided_s is None:
            self.prune_decided_s = time.perf_counter()
            threading.Thread(target=self._watch_exit, daemon=True).start()
        return prune

    def _watch_exit(self) -> None:
        if process_tree.wait_gone(list(self.pids), 30.0):
            self.exited_outside_s = time.perf_counter()


@dataclass
class Measured:
    storage: str
    trials: int = 0
    pruned: int = 0
    round_trip_s: list[float] = field(default_factory=list)
    decision_s: list[float] = field(default_factory=list)
    to_exited_s: list[float] = field(default_factory=list)
    to_gone_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def study_doc(args: argparse.Namespace, name: str, storage: str) -> dict[str, Any]:
    return {
        "study": {
            "name": name,
            "storage": storage,
            "n_trials": args.trials,
            "sampler": {"kind": "random", "seed": 0},
            "pruner": PRUNERS[args.pruner],
        },
        "objective": {"metric": "score", "direction": "maximize", "reduce": "last"},
        "trials": {
            "launcher": "process",
            "parallel": args.parallel,
            "devices": "cpu",
            "timeout_s": 300,
            "stop_grace_s": 5,
        },
        "trainer": {
            "entrypoint": "latency_entrypoint:run",
            "config": {
                "steps": args.steps,
                "step_s": args.step_s,
                "quantum": 0.0 if args.pruner == "median" else 1 / 200,
            },
        },
        "search_space": [
            {"name": "x", "path": "x", "new_key": True, "kind": "float", "low": 0.1, "high": 1.0}
        ],
    }


def run_one(args: argparse.Namespace, storage: str, label: str, folder: Path) -> Measured:
    name = f"latency-{label}-{uuid.uuid4().hex[:8]}"
    path = folder / f"{label}.yaml"
    path.write_text(yaml.safe_dump(study_doc(args, name, storage), sort_keys=False))
    spec = load_spec(path)
    lines: list[str] = []
    TimedTrialRun.instances = []
    original = study_starter.TrialRun
    study_starter.TrialRun = TimedTrialRun  # type: ignore[misc]  # TrialStarter.launch builds these
    pruner_class = optuna_factory.pruner_class
    if args.pruner == "optuna-wilcoxon":
        optuna_factory.pruner_class = lambda kind: getattr(  # type: ignore[assignment]
            optuna.pruners, sampling_kinds.PRUNERS[kind].class_name
        )
    began = time.perf_counter()
    try:
        study_runner = make_study_runner(spec, out=lines.append if not args.verbose else None)
        study_runner.run()
    finally:
        study_starter.TrialRun = original  # type: ignore[misc]
        optuna_factory.pruner_class = pruner_class  # type: ignore[assignment]
    measured = Measured(storage=redact_url(storage), wall_s=time.perf_counter() - began)
    for run in TimedTrialRun.instances:
        measured.trials += 1
        measured.decision_s.extend(run.decision_times)
        latency = json.loads((run.trial_dir / "latency.json").read_text())
        measured.round_trip_s.extend(latency["round_trip_s"])
        if run.pruned_step is None or run.prune_decided_s is None:
            continue
        measured.pruned += 1
        if run.exited_outside_s is not None:
            measured.to_exited_s.append(run.exited_outside_s - run.prune_decided_s)
        if run.process is not None and run.process.gone_s is not None:
            measured.to_gone_s.append(run.process.gone_s - run.prune_decided_s)
    if not storage.startswith("sqlite"):
        optuna.delete_study(study_name=name, storage=storage)  # leave the shared server clean
    return measured


def cell_ms(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return (
        f"{statistics.median(values) * 1e3:.1f} / {percentile(values, 95) * 1e3:.1f} / "
        f"{max(values) * 1e3:.1f}"
    )


def print_table(args: argparse.Namespace, rows: list[Measured]) -> None:
    print(
        f"\nPruning latency: {args.trials} trials x {args.steps} reports, launcher process, "
        f"parallel {args.parallel}, {args.step_s:g} s between reports, pruner {args.pruner} "
        f"({PRUNERS[args.pruner]}); {os.cpu_count()} CPUs.\n"
        "Cells: median / p95 / max in ms.\n"
    )
    header = (
        f"{'storage':<12} | {'trials':>6} | {'pruned':>6} | {'reports':>7} | "
        f"{'report->decision (trial)':>24} | {'decision (orchestrator)':>23} | "
        f"{'decision->exited':>20} | {'decision->gone':>20} | {'wall s':>6}"
    )
    print(header)
    print("-" * len(header))
    for m in rows:
        print(
            f"{m.storage.split(':', 1)[0]:<12} | {m.trials:>6} | {m.pruned:>6} | "
            f"{len(m.round_trip_s):>7} | {cell_ms(m.round_trip_s):>24} | "
            f"{cell_ms(m.decision_s):>23} | {cell_ms(m.to_exited_s):>20} | "
            f"{cell_ms(m.to_gone_s):>20} | {m.wall_s:>6.1f}"
        )
    print("\nGoals:")
    for m in rows:
        kind = m.storage.split(":", 1)[0]
        report = "no report"
        if m.round_trip_s:
            p95 = percentile(m.round_trip_s, 95)
            report = (
                f"report->decision p95 {p95 * 1e3:.1f} ms (< {REPORT_GOAL_S * 1e3:.0f} ms: "
                f"{'met' if p95 < REPORT_GOAL_S else 'MISSED'})"
            )
        gone = "no trial was pruned (more --trials or --steps)"
        if m.to_gone_s:
            worst = max(m.to_gone_s)
            gone = (
                f"decision->gone max {worst * 1e3:.0f} ms (< {GONE_GOAL_S:g} s: "
                f"{'met' if worst < GONE_GOAL_S else 'MISSED'})"
            )
        print(f"  {kind:<11} {report}; {gone}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20, help="trials per storage (20)")
    parser.add_argument("--steps", type=int, default=30, help="reports per trial (30)")
    parser.add_argument("--step-s", type=float, default=0.0, help="seconds between reports (0)")
    parser.add_argument("--parallel", type=int, default=1, help="trials at once (1)")
    parser.add_argument(
        "--pruner", choices=sorted(PRUNERS), default="median", help="which pruner (median)"
    )
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="PostgreSQL URL to try")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--verbose", action="store_true", help="print the runner's lines")
    args = parser.parse_args(argv)

    # Trials import the entry point from here (the study file lives in a temporary folder).
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(HERE), str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    rows: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="dvt-hpo-latency-") as tmp:
        folder = Path(tmp)
        rows.append(run_one(args, "sqlite:///latency.db", "sqlite", folder))
        if not args.no_postgres:
            why = unreachable_reason(args.postgres)
            if why is None:
                rows.append(run_one(args, args.postgres, "postgresql", folder))
            else:
                print(f"PostgreSQL skipped: {redact_url(args.postgres)} not reachable ({why})")
    print_table(args, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
