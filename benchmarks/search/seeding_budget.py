"""What seeding and a budget in epochs buy, on the LCBench surrogate (issue 28).

    python benchmarks/search/seeding_budget.py --quick        # 2 tasks x 1 seed, budget 8 (~10-20 s)
    python benchmarks/search/seeding_budget.py                # 6 tasks x 3 seeds, budget 20

1. **Warm start against a cold start.** For a task and a neighbour (the *nearest* task: the
   highest rank correlation of final accuracies over 2,000 random configs; and, to show when a
   warm start misleads, the *farthest*), a cold study runs on the neighbour with the budget
   below; a study on the task then starts from it with ``study.warm_start: {study: NAME, storage: URL, top: 5}``,
   whose 5 configs are chosen by dvt-hpo's own :func:`dvt_hpo.study.seeding.read_warm_start`
   (best feasible COMPLETE trials, those that fit the space) and enqueued first, against a cold
   study on the task with the same seed. Regret (the task's best validation accuracy, over
   20,000 random configs and every trial found, minus the best COMPLETE value found so far) is
   read at 25 % and 50 % of the budget in epochs.
2. **A budget in epochs against the same number of trials.** ``study.n_trials: N`` against
   ``study.budget: {epochs: N x 52}`` (the compute N full trainings would take): with pruning,
   N trials spend less than that, and the budget in epochs runs more trials for the same plan.

Studies are loaded from a study file by dvt-hpo's loader (the default sampler and pruner,
seeded) and replayed in this process as :mod:`search_replay` does (the same ask, sample,
report, prune, tell), the stopping rule being :func:`dvt_hpo.budget.compute.exhausted`
on the epochs reported, checked before each trial as ``dvt-hpo run`` does.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
try:
    import dvt_hpo  # noqa: F401
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(HERE.parents[1]))

import result_files  # noqa: E402
from lcbench_surrogate import HYPERPARAMETERS, MAX_EPOCHS, Surrogate  # noqa: E402
from search_efficiency import DEFAULT_CELL, study_document  # noqa: E402

QUICK_PAIRS, FULL_PAIRS = 2, 6
QUICK_SEEDS, FULL_SEEDS = 1, 3
QUICK_BUDGET, FULL_BUDGET = 8, 20  # full trainings' worth of epochs
TOP = 5
FRACTIONS = (0.25, 0.5)


@dataclass(frozen=True)
class Run:
    trials: int
    epochs: int
    curve: tuple[tuple[int, float], ...]  # (epochs spent when it finished, its value): COMPLETE

    def best_by(self, epochs: float) -> float | None:
        found = [v for e, v in self.curve if e <= epochs]
        return max(found) if found else None


def _spec(doc: dict[str, Any]) -> Any:
    from dvt_hpo.studyfile import load_spec

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "study.yaml"
        path.write_text(yaml.safe_dump(doc))
        return load_spec(path)


def document(task: str, seed: int, *, n_trials: int | None, epochs: int | None) -> dict[str, Any]:
    doc = study_document(DEFAULT_CELL, task, seed, 10**9, Path(tempfile.gettempdir()))
    doc["study"].pop("max_failures", None)
    doc["study"]["n_trials"] = n_trials
    if epochs is not None:
        doc["study"]["budget"] = {"epochs": epochs}
    return doc


def replay(
    spec: Any,
    task: str,
    surrogate: Surrogate,
    *,
    seeds: list[dict[str, Any]] = (),  # type: ignore[assignment]
    storage: Any = None,
    name: str | None = None,
) -> Run:
    """The study of ``spec`` on ``task``, ``seeds`` enqueued first; stops as ``run`` does."""
    import optuna

    from dvt_hpo.budget import compute as compute_budget
    from dvt_hpo.sampling import space
    from dvt_hpo.sampling.optuna_factory import build_pruner
    from dvt_hpo.study.setup import reseeded_sampler

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = optuna.create_study(
            study_name=name or spec.study.name,
            storage=storage,
            direction=spec.objective.direction,
            sampler=reseeded_sampler(spec, 0),
            pruner=build_pruner(spec.study.pruner),
        )
    for params in seeds:
        study.enqueue_trial(params, skip_if_exists=True)
    epochs = int(spec.trainer.config["epochs"])
    spent = n = 0
    curve: list[tuple[int, float]] = []
    while True:
        if spec.study.n_trials is not None and n >= spec.study.n_trials:
            break
        budget = spec.study.budget
        if budget is not None and compute_budget.exhausted(
            budget, compute_budget.Spent(epochs=spent)
        ):
            break
        trial = study.ask()
        sampled = space.sample(trial, spec.search_space)
        acc = surrogate.curve(task, {k: sampled[k] for k in HYPERPARAMETERS}, epochs)
        values = acc["val_accuracy"]
        pruned = False
        for epoch in range(1, epochs + 1):
            spent += 1
            trial.report(float(values[epoch - 1]), epoch)
            if trial.should_prune():
                pruned = True
                break
        if pruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, float(values[-1]))
            curve.append((spent, float(values[-1])))
        n += 1
    return Run(n, spent, tuple(curve))


def optimum(surrogate: Surrogate, task: str, n: int = 20_000) -> float:
    hps = surrogate.sample(n, np.random.default_rng(0))
    return float(surrogate.final_values(task, hps, "val_accuracy").max())


def rank_correlations(surrogate: Surrogate, n: int = 2_000) -> np.ndarray:
    """Spearman's correlation of every pair of tasks' final accuracies on ``n`` random configs."""
    hps = surrogate.sample(n, np.random.default_rng(1))
    ranks = np.stack(
        [
            np.argsort(np.argsort(surrogate.final_values(t, hps, "val_accuracy")))
            for t in surrogate.tasks
        ]
    )
    return np.corrcoef(ranks)


def warm_configs(
    task: str, neighbour: str, seed: int, budget: int, sur: Surrogate
) -> list[dict[str, Any]]:
    """The neighbour's cold study run into a journal file, then dvt-hpo's warm start read from
    it: the ``TOP`` configs it would enqueue."""
    import optuna

    from dvt_hpo.study.seeding import read_warm_start

    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "earlier.log"
        storage = optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(log))
        )
        spec = _spec(document(neighbour, seed, n_trials=None, epochs=budget * MAX_EPOCHS))
        replay(spec, neighbour, sur, storage=storage, name="earlier")
        doc = document(task, seed, n_trials=None, epochs=budget * MAX_EPOCHS)
        doc["study"]["warm_start"] = {
            "study": "earlier",
            "storage": f"journal:///{log}",
            "top": TOP,
        }
        seeds = read_warm_start(_spec(doc))
    return [params for params, _ in seeds.configs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 tasks x 1 seed, budget 8")
    parser.add_argument("--pairs", type=int, default=None, help="target tasks")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--budget", type=int, default=None, help="full trainings' worth")
    args = parser.parse_args(argv)
    pairs = args.pairs or (QUICK_PAIRS if args.quick else FULL_PAIRS)
    n_seeds = args.seeds or (QUICK_SEEDS if args.quick else FULL_SEEDS)
    budget = args.budget or (QUICK_BUDGET if args.quick else FULL_BUDGET)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sur = Surrogate()
    start = time.perf_counter()
    corr = rank_correlations(sur)
    total = budget * MAX_EPOCHS
    rows: list[tuple[str, str, float, list[float], list[float]]] = []
    trial_rows: list[tuple[str, Run, Run, float]] = []
    n_tasks = len(sur.tasks)
    for i in range(pairs):
        t = (i * n_tasks) // pairs
        task = sur.tasks[t]
        others = [j for j in range(n_tasks) if j != t]
        near = max(others, key=lambda j: corr[t, j])
        far = min(others, key=lambda j: corr[t, j])
        best = optimum(sur, task)
        colds = []
        for seed in range(n_seeds):
            spec = _spec(document(task, seed, n_trials=None, epochs=total))
            colds.append((seed, spec, replay(spec, task, sur)))
            by_trials = replay(_spec(document(task, seed, n_trials=budget, epochs=None)), task, sur)
            trial_rows.append((task, by_trials, colds[-1][2], best))
        for j in (near, far):
            cold_r: list[float] = []
            warm_r: list[float] = []
            for seed, spec, cold in colds:
                seeds = warm_configs(task, sur.tasks[j], seed, budget, sur)
                warm = replay(spec, task, sur, seeds=seeds)
                for frac in FRACTIONS:
                    for run, out in ((cold, cold_r), (warm, warm_r)):
                        found = run.best_by(frac * total)
                        out.append(best - found if found is not None else float("nan"))
            rows.append((task, sur.tasks[j], float(corr[t, j]), cold_r, warm_r))

    def at(values: list[float], k: int) -> str:
        # "-": no trial had completed by then (in any seed).
        picked = [v for v in values[k :: len(FRACTIONS)] if not np.isnan(v)]
        return f"{np.mean(picked):.2f}" if picked else "-"

    resolved = _spec(document(sur.tasks[0], 0, n_trials=None, epochs=total)).study
    print(
        f"budget {budget} x {MAX_EPOCHS} = {total} epochs; default sampler and pruner "
        f"({resolved.sampler.kind} {resolved.sampler.kwargs}, {resolved.pruner.kind} "
        f"{resolved.pruner.kwargs}; commit {result_files.commit()}); "
        f"{n_seeds} seed(s); regret = best val_accuracy - best found (percentage points)"
    )
    print()
    print("| task <- neighbour | rank corr. | cold @25% | warm @25% | cold @50% | warm @50% |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for task, neighbour, rho, cold_r, warm_r in rows:
        print(
            f"| {task} <- {neighbour} | {rho:.2f} | {at(cold_r, 0)} | {at(warm_r, 0)} "
            f"| {at(cold_r, 1)} | {at(warm_r, 1)} |"
        )
    for label, chosen in (("nearest", rows[0::2]), ("farthest", rows[1::2])):
        allc = [v for r in chosen for v in r[3]]
        allw = [v for r in chosen for v in r[4]]
        print(
            f"| mean, {label} neighbour | | {at(allc, 0)} | {at(allw, 0)} "
            f"| {at(allc, 1)} | {at(allw, 1)} |"
        )
    print()
    print(
        f"| task | n_trials={budget}: trials, epochs, regret | budget.epochs={total}: trials, "
        "epochs, regret |"
    )
    print("| --- | --- | --- |")
    for task, by_trials, by_epochs, best in trial_rows:
        rt = best - (by_trials.best_by(float("inf")) or 0.0)
        re = best - (by_epochs.best_by(float("inf")) or 0.0)
        print(
            f"| {task} | {by_trials.trials}, {by_trials.epochs}, {rt:.2f} | "
            f"{by_epochs.trials}, {by_epochs.epochs}, {re:.2f} |"
        )
    print(f"\n({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
