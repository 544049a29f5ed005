"""What a sampler costs the orchestrator on a large study: CPU per trial and the longest ask.

Builds a PostgreSQL study of N finished trials (4 parameters: two log floats, a float, a
categorical; each trial with 10 to 50 reports, a fifth complete, the rest pruned): 20 through
Optuna, then copied in SQL with every copy's parameters and values redrawn (``setseed``), as
``benchmarks/status_speed.py`` builds its studies. Then, per sampler, a real ``dvt-hpo run``
process (the orchestrator of ``dvt_hpo.run.run_study``, one worker, one trial at a time) runs
``--window`` more no-op trials (the toy entry point, 3 reports, no pruner, so rows differ by the
sampler alone), and reports its CPU (user + system, its interpreter start and its joining the
study included) per trial run, and its asks: the first (a worker joining the study) and the
later ones, the time to draw a trial's params from the sampler (wall, and the CPU of the
drawing thread: on a loaded machine the wall time waits for a core). The draw holds the study
lock only around its storage calls and the trial being drawn gets heartbeats meanwhile
(``dvt_hpo.study.starter``), so a long ask should fail no trial as stale: stale or failed
trials are counted. Then
``--workers`` such processes at once on the study of ``--workers-stored`` trials, each running
``--per-worker`` trials: their CPU summed over the trials they ran.

    python benchmarks/overheads/sampler_scale.py --postgres postgresql://postgres@127.0.0.1:5432/test \\
        [--stored 1000,20000] [--samplers default,tpe,mf_gp] [--window 40] \\
        [--workers 32] [--per-worker 4] [--workers-stored 1000]

``--in-process`` times the samplers' asks alone, without a database or an orchestrator, on an
in-memory study of the same trials (the sampler's CPU; one BLAS thread for numpy with
``OPENBLAS_NUM_THREADS=1``, as the default sampler sets for itself), and beside ``mf_gp`` one
decision of the ``gp_chance`` pruner, which asks its model at every report.

``default`` is what a study file that names no sampler resolves to; a kind named twice (the
default is ``mf_gp``) runs once. The rows of one stored size run on the same study, one after
the other: each sees the few trials the rows before it added.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks" / "overheads"))

from status_speed import _replicate  # noqa: E402

from dvt_hpo.budget.trials import OVER_BUDGET_ATTR  # noqa: E402

NAME = "sampler-scale"
DISTS = {
    "lr": FloatDistribution(1e-4, 1e-1, log=True),
    "wd": FloatDistribution(1e-6, 1e-2, log=True),
    "drop": FloatDistribution(0.0, 0.5),
    "width": CategoricalDistribution([16, 32, 64]),
}


def study_doc(url: str, sampler: str | None, n_trials: int) -> dict[str, Any]:
    return {
        "study": {
            "name": NAME,
            "storage": url,
            "n_trials": n_trials,
            # Left out for the default: the study's default sampler, seeded.
            "sampler": {"seed": 0} if sampler is None else {"kind": sampler, "seed": 0},
            "pruner": "none",
        },
        "objective": {"metric": "score", "direction": "maximize", "reduce": "last"},
        "trials": {"keep_logs": "none"},
        "trainer": {
            "entrypoint": "tests.entrypoints.toy:run",
            "config": {"curve": [0.1, 0.2, 0.3]},
        },
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
                "name": "wd",
                "path": "wd",
                "new_key": True,
                "kind": "float",
                "low": 1e-6,
                "high": 0.01,
                "log": True,
            },
            {
                "name": "drop",
                "path": "drop",
                "new_key": True,
                "kind": "float",
                "low": 0.0,
                "high": 0.5,
            },
            {
                "name": "width",
                "path": "width",
                "new_key": True,
                "kind": "categorical",
                "choices": [16, 32, 64],
            },
        ],
    }


def _base_trial(i: int) -> optuna.trial.FrozenTrial:
    """Trial i of the base: a curve rising to a value that peaks at lr = 3e-3."""
    lr = 10 ** (-4 + 3 * ((i * 37) % 100) / 100)
    params = {
        "lr": lr,
        "wd": 10 ** (-6 + 4 * ((i * 53) % 100) / 100),
        "drop": 0.5 * ((i * 71) % 100) / 100,
        "width": (16, 32, 64)[i % 3],
    }
    reports = 10 + (i * 13) % 41  # 10..50
    peak = 0.9 - 0.1 * (math.log10(lr) + 2.5) ** 2
    curve = {s: peak * (1 - math.exp(-(s + 1) / 8)) for s in range(reports)}
    complete = i % 5 == 0
    return create_trial(
        state=TrialState.COMPLETE if complete else TrialState.PRUNED,
        value=curve[reports - 1] if complete else None,
        params=params,
        distributions=DISTS,
        intermediate_values=curve,
    )


def build(url: str, n: int) -> None:
    """The study of ``n`` finished trials (a fresh one under ``NAME``)."""
    if NAME in optuna.get_all_study_names(storage=url):
        optuna.delete_study(study_name=NAME, storage=url)
    study = optuna.create_study(study_name=NAME, storage=url, direction="maximize")
    base = min(20, n)  # add_trials commits report by report: slow; the rest is SQL
    study.add_trials([_base_trial(i) for i in range(base)])
    _replicate(url, study._study_id, base, n)
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as conn:
        # Copies at new points, so the samplers see n distinct configs (internal values: log
        # floats as the value, the categorical as its index).
        conn.execute(sqlalchemy.text("SELECT setseed(0)"))
        trials = "(SELECT trial_id FROM trials WHERE study_id = :sid AND number >= :base)"
        args = {"sid": study._study_id, "base": base}
        for name, expr in (
            ("lr", "exp(ln(1e-4) + random() * ln(1000))"),
            ("wd", "exp(ln(1e-6) + random() * ln(10000))"),
            ("drop", "0.5 * random()"),
            ("width", "floor(3 * random())"),
        ):
            conn.execute(
                sqlalchemy.text(
                    f"UPDATE trial_params SET param_value = {expr} "
                    f"WHERE param_name = '{name}' AND trial_id IN {trials}"
                ),
                args,
            )
        for table, column in (
            ("trial_intermediate_values", "intermediate_value"),
            ("trial_values", "value"),
        ):
            conn.execute(
                sqlalchemy.text(
                    f"UPDATE {table} SET {column} = {column} + 0.05 * (random() - 0.5) "
                    f"WHERE trial_id IN {trials}"
                ),
                args,
            )
    engine.dispose()


def worker(path: Path, out: Path) -> None:
    """One ``dvt-hpo run`` of the study file at ``path`` in this process, timing each draw of a
    trial's params; writes its CPU, the trials it ran and the draws' times to ``out``."""
    from dvt_hpo import run_study
    from dvt_hpo.sampling import space

    asks: list[float] = []
    cpu: list[float] = []
    sample = space.sample

    def timed(trial: Any, dims: Any) -> Any:
        began, began_cpu = time.perf_counter(), time.thread_time()
        try:
            return sample(trial, dims)
        finally:
            asks.append(time.perf_counter() - began)
            cpu.append(time.thread_time() - began_cpu)

    space.sample = timed  # the loop draws a trial's params through this module's function
    run_study(path, out=lambda line: None)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out.write_text(json.dumps({"cpu_s": usage.ru_utime + usage.ru_stime, "asks": asks, "cpu": cpu}))


def run_workers(path: Path, url: str, sampler: str | None, workers: int, each: int) -> dict:
    """``workers`` orchestrators at once, ``each`` new trials apiece: CPU, asks, bad trials."""
    stored = optuna.load_study(study_name=NAME, storage=url).get_trials(deepcopy=False)
    before = len(stored)
    # study.n_trials does not count a trial closed as over budget (a lost race for the last
    # trial of a row before this one): the target counts as the budget does.
    counted = sum(OVER_BUDGET_ATTR not in t.system_attrs for t in stored)
    path.write_text(yaml.safe_dump(study_doc(url, sampler, counted + workers * each)))
    outs = [path.with_name(f"worker-{i}.json") for i in range(workers)]
    began = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", str(path), str(out)],
            cwd=path.parent,
            stderr=subprocess.PIPE,
            text=True,
        )
        for out in outs
    ]
    for p in procs:
        _, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"a worker exited {p.returncode}: {err.strip()[-500:]}")
    wall = time.perf_counter() - began
    results = [json.loads(out.read_text()) for out in outs]
    new = [
        t
        for t in optuna.load_study(study_name=NAME, storage=url).get_trials(deepcopy=False)
        if t.number >= before
    ]
    asks = [r["asks"] for r in results]
    later = [a for per in asks for a in per[1:]]
    later_cpu = [a for r in results for a in r["cpu"][1:]]
    return {
        "trials": len(new),
        "complete": sum(t.state == TrialState.COMPLETE for t in new),
        "cpu_per_trial": sum(r["cpu_s"] for r in results) / max(1, len(new)),
        "first_ask": max(per[0] for per in asks if per),
        "later_median": statistics.median(later) if later else float("nan"),
        "later_max": max(later, default=float("nan")),
        "first_cpu": max(r["cpu"][0] for r in results if r["cpu"]),
        "later_cpu": statistics.median(later_cpu) if later_cpu else float("nan"),
        "wall": wall,
    }


def in_process(stored: int, kinds: dict[str, str]) -> None:
    """Each sampler's asks on an in-memory study of ``stored`` trials like the built ones (no
    database, no orchestrator): the sampler's own CPU, the first ask and the median of 5 more."""
    import random
    import warnings

    from dvt_hpo.sampling.kinds import default_algorithms
    from dvt_hpo.sampling.optuna_factory import build_sampler
    from dvt_hpo.spec.model import SamplerSpec

    rng = random.Random(0)
    trials = []
    for i in range(stored):
        t = _base_trial(i % 100)
        t.params = {  # a new point, as the SQL copies get
            "lr": math.exp(math.log(1e-4) + rng.random() * math.log(1000)),
            "wd": math.exp(math.log(1e-6) + rng.random() * math.log(10000)),
            "drop": 0.5 * rng.random(),
            "width": (16, 32, 64)[rng.randrange(3)],
        }
        trials.append(t)
    for kind, label in kinds.items():
        spec = default_algorithms()[0] if kind == "default" else SamplerSpec(kind, {})
        sampler = build_sampler(SamplerSpec(spec.kind, {**spec.kwargs, "seed": 0}), [])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study = optuna.create_study(direction="maximize", sampler=sampler)
        study.add_trials(trials)
        times = []
        for _ in range(6):
            began = time.process_time()
            trial = study.ask()
            for name, dist in DISTS.items():
                trial._suggest(name, dist)
            times.append(time.process_time() - began)
            study.tell(trial, state=TrialState.FAIL)  # leaves the modelled trials as they are
        decision = (
            f"{_decision_s(study):.3f} s"
            if sampler.__class__.__name__ == "MultiFidelityGPSampler"
            else "-"
        )
        print(
            f"| {stored} | {label} | {times[0]:.2f} s | {statistics.median(times[1:]):.3f} s "
            f"| {decision} |",
            flush=True,
        )


def _decision_s(study: optuna.Study) -> float:
    """The median CPU of 5 ``gp_chance`` decisions (the GP's stopping rule, which asks the
    sampler's model at every report) on a trial running with 5 reports."""
    from dvt_hpo.sampling.gp_chance import GPChancePruner

    pruner = GPChancePruner()
    trial = study.ask()
    for name, dist in DISTS.items():
        trial._suggest(name, dist)
    for step in range(5):
        trial.report(0.1 * step, step)
    frozen = study._storage.get_trial(trial._trial_id)
    times = []
    for _ in range(5):
        began = time.process_time()
        pruner.prune(study, frozen)
        times.append(time.process_time() - began)
    study.tell(trial, state=TrialState.FAIL)
    return statistics.median(times)


def resolved(kind: str) -> str | None:
    """``None`` for ``default`` (the study file names no sampler), else the kind."""
    return None if kind == "default" else kind


def main() -> None:
    global NAME
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        worker(Path(sys.argv[2]), Path(sys.argv[3]))
        return
    # Trial processes import the toy entry point from the repository.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", help="a PostgreSQL URL (a database of it)")
    parser.add_argument("--stored", default="1000,20000", help="stored trials, comma-separated")
    parser.add_argument("--samplers", default="default,tpe,mf_gp", help="kinds, comma-separated")
    parser.add_argument("--window", type=int, default=40, help="new trials of one worker (0: none)")
    parser.add_argument("--workers", type=int, default=32, help="orchestrators at once (0: none)")
    parser.add_argument("--per-worker", type=int, default=4, help="new trials of each")
    parser.add_argument("--workers-stored", type=int, default=1000)
    parser.add_argument("--study", default=NAME, help="the study's name in the database")
    parser.add_argument(
        "--in-process", action="store_true", help="the samplers' asks alone, in memory"
    )
    args = parser.parse_args()
    NAME = args.study
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    from dvt_hpo.sampling.kinds import default_algorithms

    default_kind = default_algorithms()[0].kind
    kinds: dict[str, str] = {}  # what runs -> its label
    for kind in args.samplers.split(","):
        real = default_kind if kind == "default" else kind
        if real not in {default_kind if k == "default" else k for k in kinds}:
            kinds[kind] = f"{real} (the default)" if real == default_kind else real
    if not args.in_process and not args.postgres:
        parser.error("--postgres is required (or --in-process)")
    if args.in_process:
        print(
            "| stored trials | sampler | first ask (CPU) | later asks: median (CPU) "
            "| a `gp_chance` decision: median (CPU) |"
        )
        print("| --- | --- | --- | --- | --- |")
        for n in args.stored.split(","):
            in_process(int(n), kinds)
        return
    rows = [(int(n), 1, args.window) for n in args.stored.split(",") if args.window]
    if args.workers:
        rows.append((args.workers_stored, args.workers, args.per_worker))
    print(
        "| stored trials | workers | sampler | new trials (complete) | orchestrator CPU per trial "
        "| vs TPE | first ask: wall (CPU) | later asks: median wall (CPU) / max wall | wall |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "study.yaml"
        built = None
        for stored, workers, each in rows:
            if built != stored:
                began = time.perf_counter()
                build(args.postgres, stored)
                print(
                    f"built {stored} trials in {time.perf_counter() - began:.0f} s", file=sys.stderr
                )
                built = stored
            results = {
                kind: run_workers(path, args.postgres, resolved(kind), workers, each)
                for kind in kinds
            }
            tpe = next((r for k, r in results.items() if k == "tpe"), None)
            for kind, r in results.items():
                ratio = f"{r['cpu_per_trial'] / tpe['cpu_per_trial']:.2f}x" if tpe else "-"
                print(
                    f"| {stored} | {workers} | {kinds[kind]} | {r['trials']} ({r['complete']}) "
                    f"| {r['cpu_per_trial']:.3f} s | {ratio} | {r['first_ask']:.2f} s "
                    f"({r['first_cpu']:.2f} s) | {r['later_median']:.3f} s "
                    f"({r['later_cpu']:.3f} s) / {r['later_max']:.2f} s | {r['wall']:.0f} s |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
