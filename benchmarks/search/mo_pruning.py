"""Several objectives pruned: hypervolume of LCBench's accuracy/training-time front with the
``mo_asha`` pruner against no pruning, at 50 % and 100 % of an epoch budget.

    pip install -e '.[bench]'                                   # onnxruntime
    python benchmarks/search/mo_pruning.py --quick                     # 3 tasks x 2 seeds, under a minute
    python benchmarks/search/mo_pruning.py --tasks 8 --seeds 3 --check 2

Each study maximizes the surrogate's ``val_accuracy`` and minimizes its ``time`` (the predicted
training time of the epochs so far; a complete trial's is its 52 epochs'), ``reduce: last``,
on the YAHPO Gym LCBench surrogate (:mod:`lcbench_surrogate`). A study runs until ``--budget``
full trainings' worth of epochs (30 x 52 by default) are spent, counted as they are trained; a
trial that would pass the 50 % or 100 % mark is not counted as complete there.

What is measured at each mark: the hypervolume of the COMPLETE trials' (accuracy, time) points
(what ``dvt-hpo best`` shows as the front; a pruned trial has no values), each objective scaled
per task to [0, 1] between the best and worst final values of 2,000 random configs (points past
the worst count for nothing), so 1.0 is a single config as accurate as the most accurate of
them and as fast as the fastest.

The studies are replayed in this process with one trial at a time, as ``search_replay`` does for
one objective: the study file loaded by dvt-hpo's loader, its sampler seeded as a fresh run seeds
it, params drawn by :func:`dvt_hpo.sampling.space.sample`, every epoch decided by
:func:`dvt_hpo.sampling.mo_pruner.report_and_prune` (the code ``dvt-hpo run`` calls) on Optuna's
in-memory storage. ``--check N`` first runs N studies through ``dvt-hpo run``
(``lcbench_trainer``, a real orchestrator and trial processes) and stops unless every trial's
params, state and epochs are the replay's.
"""

from __future__ import annotations

import argparse
import math
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
try:
    import dvt_hpo  # noqa: F401
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402
import result_files  # noqa: E402
import yaml  # noqa: E402
from lcbench_surrogate import HYPERPARAMETERS, MAX_EPOCHS, Surrogate, search_space  # noqa: E402

SAMPLERS: dict[str, dict[str, Any]] = {
    "random": {"kind": "random"},
    # dvt-hpo's default with several objectives. At Optuna's default population (50) it is
    # random search within 30 trainings; 10 lets it breed a few generations.
    "nsga2": {"kind": "nsga2", "population_size": 10},
    "tpe": {"kind": "tpe"},  # Optuna's multi-objective TPE (MOTPE)
}
PRUNERS: dict[str, dict[str, Any]] = {
    "none": {"kind": "none"},
    # dvt-hpo's defaults: the first rung at a tenth of the epochs (5 of 52), reduction_factor 3.
    "mo_asha": {"kind": "mo_asha"},
    # MO-ASHA's own defaults (Syne Tune: grace_period 1, reduction_factor 3).
    "mo_asha-r1": {"kind": "mo_asha", "min_resource": 1},
    "mo_asha-r9": {"kind": "mo_asha", "min_resource": 9},
}
QUICK_TASKS = ("3945", "167168", "189906")
FULL_BUDGET = 30
QUICK_BUDGET = 10
MARKS = (0.5, 1.0)
# The curve's marks (shares of the budget), to find where a pruned study first matches the
# unpruned one's final hypervolume.
CURVE = tuple(round(0.05 * i, 2) for i in range(1, 21))
OBJECTIVES = ("val_accuracy", "time")
_REFERENCE_CONFIGS = 2000

SURROGATE: Surrogate | None = None


def surrogate() -> Surrogate:
    global SURROGATE
    if SURROGATE is None:
        SURROGATE = Surrogate()
    return SURROGATE


@dataclass(frozen=True)
class Trial:
    number: int
    state: str  # COMPLETE | PRUNED
    epochs: int
    spent: int  # the study's epochs spent when this trial ended
    values: tuple[float, float] | None  # (val_accuracy, time) of a complete trial
    params: tuple[float, ...]


def study_document(
    sampler: str, pruner: str, task: str, seed: int, budget: int, folder: Path
) -> dict[str, Any]:
    return {
        "study": {
            "name": "lcbench-mo",
            "storage": "journal:///study.log",
            "n_trials": 100_000,  # the epoch budget ends the run
            "max_failures": 1,
            "sampler": {**SAMPLERS[sampler], "seed": seed},
            "pruner": dict(PRUNERS[pruner]),
        },
        "objective": {
            "metrics": [
                {"name": "val_accuracy", "direction": "maximize"},
                {"name": "time", "direction": "minimize"},
            ],
            "reduce": "last",
        },
        "trials": {"parallel": 1, "devices": "cpu", "keep_logs": "none", "timeout_s": 600},
        "trainer": {
            "entrypoint": "lcbench_trainer:run",
            "config": {
                "task": task,
                "epochs": MAX_EPOCHS,
                "budget_epochs": budget,
                "epochs_file": str(folder / "epochs"),
                "hp": {name: 0 for name in HYPERPARAMETERS},
            },
        },
        "search_space": search_space(surrogate().dimensions),
    }


def replay(sampler: str, pruner: str, task: str, seed: int, budget: int) -> list[Trial]:
    """One study in this process (see the module): its trials in order."""
    import optuna

    from dvt_hpo.sampling import space
    from dvt_hpo.sampling.mo_pruner import report_and_prune
    from dvt_hpo.sampling.optuna_factory import build_pruner
    from dvt_hpo.study.setup import reseeded_sampler
    from dvt_hpo.studyfile import load_spec

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "study.yaml"
        doc = study_document(sampler, pruner, task, seed, budget, Path(folder))
        path.write_text(yaml.safe_dump(doc))
        spec = load_spec(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = optuna.create_study(
            study_name=spec.study.name,
            directions=list(spec.objective.directions),
            sampler=reseeded_sampler(spec, 0),
            pruner=build_pruner(spec.study.pruner),
        )
    names = spec.objective.names
    spent = 0
    out: list[Trial] = []
    while spent < budget:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trial = study.ask()
        hp = space.sample(trial, spec.search_space)
        curve = surrogate().curve(task, {k: hp[k] for k in HYPERPARAMETERS}, MAX_EPOCHS)
        state, trained = "COMPLETE", MAX_EPOCHS
        for epoch in range(1, MAX_EPOCHS + 1):
            spent += 1
            metrics = {name: float(curve[name][epoch - 1]) for name in names}
            if report_and_prune(study, trial._trial_id, epoch, metrics, names):
                state, trained = "PRUNED", epoch
                break
        values = None
        if state == "COMPLETE":
            values = (float(curve["val_accuracy"][-1]), float(curve["time"][-1]))
            study.tell(trial, list(values))
        else:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        params = tuple(float(hp[k]) for k in HYPERPARAMETERS)
        out.append(Trial(trial.number, state, trained, spent, values, params))
    return out


def run_study(sampler: str, pruner: str, task: str, seed: int, budget: int) -> list[Trial]:
    """The same study through ``dvt-hpo run`` (lcbench_trainer), read back from its journal."""
    import os

    from dvt_hpo.store.opening import StudyAt

    folder = Path(tempfile.mkdtemp(prefix="dvt-lcbench-mo-"))
    try:
        path = folder / "study.yaml"
        path.write_text(yaml.safe_dump(study_document(sampler, pruner, task, seed, budget, folder)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(REPO_ROOT), env.get("PYTHONPATH", "")])
        env["OMP_NUM_THREADS"] = "1"
        proc = subprocess.run(
            [sys.executable, "-m", "dvt_hpo", "run", str(path)],
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
        if "epoch budget spent" not in proc.stdout:
            raise RuntimeError(f"dvt-hpo run did not spend its budget:\n{proc.stdout[-3000:]}")
        study = StudyAt(f"journal:///{folder / 'study.log'}", "lcbench-mo").load().study
        out, spent = [], 0
        for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
            epochs = int(t.user_attrs.get("epochs_reported", 0))
            if epochs == 0:
                continue  # the trial that found the budget spent
            spent += epochs
            values = tuple(t.values) if t.state.name == "COMPLETE" else None
            params = tuple(float(t.params[k]) for k in HYPERPARAMETERS)
            out.append(Trial(t.number, t.state.name, epochs, spent, values, params))  # type: ignore[arg-type]
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def reference_box(task: str) -> tuple[np.ndarray, np.ndarray]:
    """(ideal, worst) final (accuracy, time) over random configs of ``task``, as minimized."""
    s = surrogate()
    hps = s.sample(_REFERENCE_CONFIGS, np.random.default_rng(12345))
    acc = s.final_values(task, hps, "val_accuracy")
    seconds = s.final_values(task, hps, "time")
    points = np.stack([-acc, seconds], axis=1).astype(np.float64)
    return points.min(axis=0), points.max(axis=0)


def hypervolume(values: list[tuple[float, float]], ideal: np.ndarray, worst: np.ndarray) -> float:
    """The area dominated by ``values`` (accuracy max, time min) in the unit box between
    ``ideal`` (0, 0) and ``worst`` (1, 1), both as minimized."""
    if not values:
        return 0.0
    pts = (np.array([[-a, t] for a, t in values]) - ideal) / (worst - ideal)
    pts = pts[np.all(pts < 1.0, axis=1)]
    pts = np.clip(pts, 0.0, None)
    area, best_y = 0.0, 1.0
    for x, y in sorted(map(tuple, pts)):
        if y < best_y:
            area += (1.0 - x) * (best_y - y)
            best_y = y
    return float(area)


def marks_hv(trials: list[Trial], budget: int, box: tuple[np.ndarray, np.ndarray]) -> list[float]:
    """The hypervolume at each share of :data:`CURVE` (the last is 100 %)."""
    out = []
    for mark in CURVE:
        limit = mark * budget
        done = [t.values for t in trials if t.values is not None and t.spent <= limit]
        out.append(hypervolume(done, *box))  # type: ignore[arg-type]
    return out


def at(hv: list[float], mark: float) -> float:
    return hv[CURVE.index(mark)]


def print_table(
    table: dict[tuple[str, str], dict[tuple[str, int], tuple[list[float], int, int]]],
    samplers: list[str],
    pruners: list[str],
) -> None:
    """Mean hypervolume at 50 % and 100 %; against the same studies unpruned: the gap to 1
    (the unit box's corner) as a share of theirs, the studies ahead, and the median share of
    the budget at which the pruned study first reaches their final hypervolume."""
    print(
        "| sampler | pruner | HV at 50 % | HV at 100 % | gap vs none at 50 % | at 100 % "
        "| ahead at 50 % | at 100 % | budget to none's final HV | trials | complete |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for sampler in samplers:
        base = table.get((sampler, "none"), {})
        for pruner in pruners:
            cells = table[(sampler, pruner)]
            keys = sorted(cells)
            hv = [cells[k][0] for k in keys]
            half = np.array([at(h, 0.5) for h in hv])
            full = np.array([at(h, 1.0) for h in hv])
            row = [sampler, pruner, f"{half.mean():.4f}", f"{full.mean():.4f}"]
            if base and pruner != "none":
                ref = [base[k][0] for k in keys]
                ref_half = np.array([at(h, 0.5) for h in ref])
                ref_full = np.array([at(h, 1.0) for h in ref])
                reach = [
                    next((m for m, v in zip(CURVE, h, strict=True) if v >= at(r, 1.0)), math.inf)
                    for h, r in zip(hv, ref, strict=True)
                ]
                median = float(np.median(reach))
                row += [
                    f"{(1 - half).mean() / (1 - ref_half).mean():.2f}",
                    f"{(1 - full).mean() / (1 - ref_full).mean():.2f}",
                    f"{int(np.sum(half > ref_half))}/{len(keys)}",
                    f"{int(np.sum(full > ref_full))}/{len(keys)}",
                    f"{median:.0%}" if math.isfinite(median) else "not reached",
                ]
            else:
                row += ["", "", "", "", ""]
            row += [
                f"{np.mean([cells[k][1] for k in keys]):.0f}",
                f"{np.mean([cells[k][2] for k in keys]):.0f}",
            ]
            print("| " + " | ".join(row) + " |")


def _one(
    item: tuple[str, str, str, int, int],
) -> tuple[tuple[str, str, str, int], list[float], int, int, float]:
    sampler, pruner, task, seed, budget = item
    start = time.perf_counter()
    trials = replay(sampler, pruner, task, seed, budget)
    hv = marks_hv(trials, budget, reference_box(task))
    complete = sum(t.state == "COMPLETE" for t in trials)
    return (sampler, pruner, task, seed), hv, len(trials), complete, time.perf_counter() - start


def check(n: int, tasks: list[str], samplers: list[str], budget: int) -> None:
    """Stop unless ``n`` studies through ``dvt-hpo run`` are their replays, trial for trial."""
    for i in range(n):
        sampler, task = samplers[i % len(samplers)], tasks[i % len(tasks)]
        real = run_study(sampler, "mo_asha", task, i, budget)
        again = replay(sampler, "mo_asha", task, i, budget)
        key = [(t.number, t.state, t.epochs, np.round(t.params, 9).tolist()) for t in real]
        if key != [(t.number, t.state, t.epochs, np.round(t.params, 9).tolist()) for t in again]:
            raise SystemExit(f"check failed: {sampler} task {task} seed {i}: the replay differs")
        pruned = sum(t.state == "PRUNED" for t in real)
        print(
            f"check: {sampler}+mo_asha task {task} seed {i}: {len(real)} trials ({pruned} pruned), "
            "dvt-hpo run = replay"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="3 tasks x 2 seeds, budget 10")
    p.add_argument("--tasks", default="8", help="a count (spread over the 34), 'all' or ids")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--first-seed", type=int, default=0, help="seeds from this one on")
    p.add_argument("--budget", type=int, help=f"full trainings' worth of epochs ({FULL_BUDGET})")
    p.add_argument("--samplers", default="random,nsga2,tpe")
    p.add_argument("--pruners", default="none,mo_asha,mo_asha-r1,mo_asha-r9")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--check", type=int, default=0, help="studies run through dvt-hpo run first")
    args = p.parse_args(argv)
    all_tasks = list(surrogate().tasks)
    if args.quick:
        tasks, seeds, budget_n = list(QUICK_TASKS), 2, args.budget or QUICK_BUDGET
        samplers, pruners = ["random", "tpe"], ["none", "mo_asha"]
    else:
        if args.tasks == "all":
            tasks = all_tasks
        elif args.tasks.isdigit():
            k = int(args.tasks)
            tasks = [all_tasks[round(i * (len(all_tasks) - 1) / max(1, k - 1))] for i in range(k)]
        else:
            tasks = args.tasks.split(",")
        seeds, budget_n = args.seeds, args.budget or FULL_BUDGET
        samplers, pruners = args.samplers.split(","), args.pruners.split(",")
    budget = budget_n * MAX_EPOCHS
    if args.check:
        check(args.check, tasks, samplers, min(budget, 5 * MAX_EPOCHS))
    items = [
        (s, pr, t, seed, budget)
        for s in samplers
        for pr in pruners
        for t in tasks
        for seed in range(args.first_seed, args.first_seed + seeds)
    ]
    start = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(_one, items))
    else:
        results = [_one(item) for item in items]
    table: dict[tuple[str, str], dict[tuple[str, int], tuple[list[float], int, int]]] = {}
    for (sampler, pruner, task, seed), hv, n, complete, _ in results:
        table.setdefault((sampler, pruner), {})[(task, seed)] = (hv, n, complete)
    print(
        f"LCBench, maximize val_accuracy and minimize time, {len(tasks)} tasks x {seeds} seeds, "
        f"budget {budget_n} x {MAX_EPOCHS} epochs, one trial at a time, commit "
        f"{result_files.commit()} ({time.perf_counter() - start:.0f} s)\n"
    )
    print_table(table, samplers, pruners)
    if any(math.isnan(v) for r in results for v in r[1]):
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
