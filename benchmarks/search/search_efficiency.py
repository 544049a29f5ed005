"""Search efficiency: which sampler and pruner find the best LCBench model for the fewest epochs.

    pip install -e '.[bench]'                                    # onnxruntime, matplotlib
    python benchmarks/search/search_efficiency.py --quick               # 3 tasks x 2 seeds x 3 cells
    python benchmarks/search/search_efficiency.py --screen --results R  # every cell, a few tasks
    python benchmarks/search/search_efficiency.py --cells tpe+none,tpe+median,default \\
        --tasks all --seeds 5 --results R --plot docs/search-efficiency.png

Every study runs through ``dvt-hpo run`` (a real orchestrator process, warm trial processes,
each epoch reported and pruned over the control channel, the study in its own journal file on
``/dev/shm`` when there is one) on ``benchmarks/search/lcbench_trainer.py``: the YAHPO Gym LCBench
surrogate (34 OpenML tasks, 7 hyperparameters of an MLP, 52 epochs), whose every epoch reports
the surrogate's validation accuracy for the trial's config. A study runs until its budget of
epochs (``--budget`` full trainings' worth, 30 x 52 by default) is spent: the trial that finds
it spent fails, and ``study.max_failures: 1`` ends the run.

A cell is ``sampler+pruner`` (see :data:`SAMPLERS` and :data:`PRUNERS`), or ``default``: the
study file names neither, so what it measures is what dvt-hpo picks when a user says nothing.
Results are one JSON file per study under ``--results`` (a rerun skips the studies already
there), each with the sampler and pruner its study file resolved to and the commit that ran it;
then :mod:`search_efficiency_report` prints the tables and draws the plots. ``--report-only``
also reads a grid packed into one file (``--results benchmarks/search/results/GRID.jsonl.gz``,
see :mod:`result_files`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
try:
    import dvt_hpo  # noqa: F401
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(REPO_ROOT))

import result_files  # noqa: E402
import yaml  # noqa: E402
from lcbench_surrogate import MAX_EPOCHS, Surrogate, search_space  # noqa: E402
from spend import run_until_spent, scratch  # noqa: E402

# Sampler and pruner settings of the grid, as study.yaml writes them ("seed" is added per run).
# "tpe" is Optuna's TPESampler as dvt-hpo built it before this benchmark (Optuna's defaults:
# multivariate under Optuna 5, univariate under 4.x); "tpe-uni" and "tpe-mv" say which.
# The constrained default's sampler (every study's from issue 31's fourth round to its sixth),
# which the later rounds' TPE candidates vary.
_TPE_UNI_CE: dict[str, Any] = {"kind": "tpe", "multivariate": False, "consider_endpoints": True}
SAMPLERS: dict[str, dict[str, Any]] = {
    "random": {"kind": "random"},
    "tpe": {"kind": "tpe"},
    "tpe-uni": {"kind": "tpe", "multivariate": False},
    "tpe-mv": {"kind": "tpe", "multivariate": True},
    "cmaes": {"kind": "cmaes"},
    "qmc": {"kind": "qmc", "scramble": True},
    # Candidates for the default (issue 31): TPE fitted on the values at the highest epoch that
    # min_trials finished trials reached (dvt_hpo.sampling.rung_tpe).
    "rung10": {"kind": "rung_tpe", "min_trials": 10},
    "rung20": {"kind": "rung_tpe", "min_trials": 20},
    "rung40": {"kind": "rung_tpe", "min_trials": 40},
    # Issue 31, fourth round: TPE's kernel widths taking the bounds into account (the default's
    # sampler since then), and with a multivariate model or half the prior's weight.
    "tpe-uni-ce": dict(_TPE_UNI_CE),
    "tpe-mv-ce": {"kind": "tpe", "multivariate": True, "consider_endpoints": True},
    "tpe-uni-s5": {"kind": "tpe", "multivariate": False, "n_startup_trials": 5},
    "tpe-uni-s20": {"kind": "tpe", "multivariate": False, "n_startup_trials": 20},
    "tpe-uni-pw05": {"kind": "tpe", "multivariate": False, "prior_weight": 0.5},
    "tpe-uni-ce-s5": {**_TPE_UNI_CE, "n_startup_trials": 5},
    "tpe-uni-ce-pw05": {**_TPE_UNI_CE, "prior_weight": 0.5},
    # Issue 31, fifth round: the fourth round's TPE settings under the new default's pruner, and
    # a greedier choice among more candidates.
    "tpe-uni-ce-s5-pw05": {**_TPE_UNI_CE, "n_startup_trials": 5, "prior_weight": 0.5},
    "tpe-uni-ce-ei100": {**_TPE_UNI_CE, "n_ei_candidates": 100},
    # Issue 31, sixth round: a GP over (config, epoch) fitted on every trial's curve, as
    # MOBSTER's (dvt_hpo.sampling.mf_gp).
    "mf-gp": {"kind": "mf_gp"},
}
# The grid's samplers (tpe-mv is "tpe" under Optuna 5; qmc on request).
GRID_SAMPLERS = ("random", "tpe", "tpe-uni", "cmaes")
GRID_PRUNERS = ("none", "median", "percentile", "sha", "hyperband", "wilcoxon")
PRUNERS: dict[str, dict[str, Any]] = {
    "none": {"kind": "none"},
    "median": {"kind": "median"},
    "percentile": {"kind": "percentile", "percentile": 25.0},
    "sha": {"kind": "successive_halving"},
    "hyperband": {"kind": "hyperband", "min_resource": 1, "max_resource": MAX_EPOCHS},
    "wilcoxon": {"kind": "wilcoxon"},
    # Successive halving (rungs at 3, 9, 27 epochs) and Wilcoxon, either stopping a trial
    # (dvt_hpo.sampling.wilcoxon_halving): every study's default from issue 31's fourth round to
    # its sixth, since then the default only with objective.constraints
    # (dvt_hpo.sampling.kinds.DEFAULTS).
    "wilcoxon-halving": {"kind": "wilcoxon_halving"},
    # Issue 31, fifth round: the then default pruner with a higher threshold, a later first rung.
    "wilcoxon-halving-p2": {"kind": "wilcoxon_halving", "p_threshold": 0.2},
    "wilcoxon-halving-m4": {"kind": "wilcoxon_halving", "min_resource": 4},
    # Candidates for the default (issue 31): Wilcoxon with another threshold or a minimum of
    # epochs before it decides.
    "wilcoxon-p05": {"kind": "wilcoxon", "p_threshold": 0.05},
    "wilcoxon-p2": {"kind": "wilcoxon", "p_threshold": 0.2},
    "wilcoxon-p3": {"kind": "wilcoxon", "p_threshold": 0.3},
    "wilcoxon-s5": {"kind": "wilcoxon", "n_startup_steps": 5},
    "wilcoxon-s10": {"kind": "wilcoxon", "n_startup_steps": 10},
    # The screen's two nearest (a higher threshold reached the target sooner, a later first
    # decision had the lower regret at 25 and 100 %), together.
    "wilcoxon-p2s5": {"kind": "wilcoxon", "p_threshold": 0.2, "n_startup_steps": 5},
    "wilcoxon-p2s10": {"kind": "wilcoxon", "p_threshold": 0.2, "n_startup_steps": 10},
    # "Keep the top share after i epochs" (i-Epoch, Egele et al. 2023), written with Optuna's own
    # pruners. Asynchronous successive halving with a first rung late enough that LCBench's curves
    # have stopped crossing: rungs at min_resource x reduction_factor^k, the top 1/reduction_factor
    # of every trial that reached a rung (pruned ones included) going on.
    "sha-m2r3": {"kind": "successive_halving", "min_resource": 2, "reduction_factor": 3},
    "sha-m3r3": {"kind": "successive_halving", "min_resource": 3, "reduction_factor": 3},
    "sha-m4r3": {"kind": "successive_halving", "min_resource": 4, "reduction_factor": 3},
    "sha-m5r3": {"kind": "successive_halving", "min_resource": 5, "reduction_factor": 3},
    "sha-m8r3": {"kind": "successive_halving", "min_resource": 8, "reduction_factor": 3},
    "sha-m3r4": {"kind": "successive_halving", "min_resource": 3, "reduction_factor": 4},
    "sha-m5r4": {"kind": "successive_halving", "min_resource": 5, "reduction_factor": 4},
    "sha-m8r4": {"kind": "successive_halving", "min_resource": 8, "reduction_factor": 4},
    # One rung only (min_resource x reduction_factor past the last epoch): the top 1/r after i
    # epochs train to the end, i-Epoch's rule run online.
    "sha-m5r11": {"kind": "successive_halving", "min_resource": 5, "reduction_factor": 11},
    "sha-m10r6": {"kind": "successive_halving", "min_resource": 10, "reduction_factor": 6},
    "sha-m18r3": {"kind": "successive_halving", "min_resource": 18, "reduction_factor": 3},
    # One decision at epoch i (n_warmup_steps i, an interval past the last epoch): kept when in
    # the top `percentile` % of the *completed* trials' values at epoch i (Optuna's percentile
    # pruner compares with complete trials only, so the bar rises as better trials finish).
    "pct25-e5": {
        "kind": "percentile",
        "percentile": 25.0,
        "n_warmup_steps": 5,
        "interval_steps": MAX_EPOCHS,
    },
    "pct25-e10": {
        "kind": "percentile",
        "percentile": 25.0,
        "n_warmup_steps": 10,
        "interval_steps": MAX_EPOCHS,
    },
    # The old default's median rule, deciding from epoch i on instead of from the first.
    "median-w5": {"kind": "median", "n_warmup_steps": 5},
    "median-w10": {"kind": "median", "n_warmup_steps": 10},
}
# The pruner candidates of issue 31, each under univariate TPE (the default's sampler), beside
# the default and the baseline: `--cells issue31`.
ISSUE31_PRUNERS = (
    "wilcoxon-p05",
    "wilcoxon-p2",
    "wilcoxon-p3",
    "wilcoxon-s5",
    "wilcoxon-s10",
    "wilcoxon-p2s5",
    "wilcoxon-p2s10",
    "sha-m2r3",
    "sha-m3r3",
    "sha-m4r3",
    "sha-m5r3",
    "sha-m8r3",
    "sha-m3r4",
    "sha-m5r4",
    "sha-m8r4",
    "sha-m5r11",
    "sha-m10r6",
    "sha-m18r3",
    "pct25-e5",
    "pct25-e10",
    "median-w5",
    "median-w10",
)
CELL_GROUPS: dict[str, tuple[str, ...]] = {
    "issue31": ("tpe+none", "tpe-uni+wilcoxon", *(f"tpe-uni+{p}" for p in ISSUE31_PRUNERS)),
}
DEFAULT_CELL = "default"
# The cell the default resolves to (dvt_hpo/sampling/kinds.py); `tpe-uni+wilcoxon` before
# issue 31's fourth round, `tpe-uni-ce+wilcoxon-halving` before its sixth.
DEFAULT_RESOLVES_TO = "mf-gp+wilcoxon"
QUICK_CELLS = ("tpe+none", "tpe+median", DEFAULT_CELL)
QUICK_TASKS = ("3945", "167168", "189906")
FULL_BUDGET = 30  # full trainings' worth of epochs per study
QUICK_BUDGET = 10
# The screening grid: every cell on a spread of tasks (every fifth of the 34).
SCREEN_STEP = 5
# Several trials at a time (--parallel): 8 tasks spread over the 34 (every 4th of the sorted
# list, the first 8), and the scale of the surrogate's per-epoch time each epoch sleeps, so that
# trials finish in the order their trainings would (the 4-at-a-time table of the note).
SPREAD_TASKS_STEP, SPREAD_TASKS_N = 4, 8
PARALLEL_SLEEP_SCALE = 0.005


@dataclass(frozen=True)
class Trial:
    number: int
    state: str  # COMPLETE | PRUNED | FAIL
    epochs: int  # epochs trained (reports)
    value: float | None  # val_accuracy of a complete trial
    time_s: float  # the surrogate's predicted training time of those epochs


@dataclass(frozen=True)
class StudyResult:
    cell: str
    task: str
    seed: int
    budget_epochs: int
    wall_s: float
    exit_code: int
    trials: tuple[Trial, ...]
    engine: str = "dvt"  # "dvt": through dvt-hpo run; "replay": search_replay, in one process
    parallel: int = 1  # trials at a time (trials.parallel); trials listed in the order they ended
    sleep_scale: float = 0.0  # each epoch slept the surrogate's time of it x this
    # What the study file resolved to ({"kind": ..., **arguments}; what "default" meant then)
    # and the commit that ran it: set by `save`, None / "" in results saved before they were.
    sampler: dict[str, Any] | None = None
    pruner: dict[str, Any] | None = None
    commit: str = ""


def all_cells() -> list[str]:
    return [f"{s}+{p}" for s in GRID_SAMPLERS for p in GRID_PRUNERS] + [DEFAULT_CELL]


def spread_tasks(tasks: list[str]) -> list[str]:
    """The tasks of the several-trials-at-a-time table (every 4th of the 34, the first 8)."""
    return tasks[::SPREAD_TASKS_STEP][:SPREAD_TASKS_N]


def study_document(
    cell: str,
    task: str,
    seed: int,
    budget: int,
    folder: Path,
    parallel: int = 1,
    sleep_scale: float = 0.0,
) -> dict[str, Any]:
    study: dict[str, Any] = {
        "name": "lcbench",
        "storage": "journal:///study.log",
        "n_trials": 10_000,  # the epoch budget ends the run
        "max_failures": 1,
    }
    if cell != DEFAULT_CELL:
        sampler, pruner = cell.split("+")
        study["sampler"] = {**SAMPLERS[sampler], "seed": seed}
        study["pruner"] = dict(PRUNERS[pruner])
    else:
        # Neither kind is named: dvt-hpo's defaults, the sampler only seeded.
        study["sampler"] = {"seed": seed}
    doc = {
        "study": study,
        "objective": {"metric": "val_accuracy", "direction": "maximize", "reduce": "last"},
        "trials": {"parallel": parallel, "devices": "cpu", "keep_logs": "none", "timeout_s": 600},
        "trainer": {
            "entrypoint": "lcbench_trainer:run",
            "config": {
                "task": task,
                "epochs": MAX_EPOCHS,
                "budget_epochs": budget,
                "epochs_file": str(folder / "epochs"),
                **({"sleep_scale": sleep_scale} if sleep_scale else {}),
                "hp": {
                    "batch_size": 91,
                    "learning_rate": 0.003,
                    "momentum": 0.5,
                    "weight_decay": 0.05,
                    "num_layers": 3,
                    "max_units": 256,
                    "max_dropout": 0.5,
                },
            },
        },
        "search_space": search_space(SURROGATE.dimensions),
    }
    return doc


def run_study(
    cell: str, task: str, seed: int, budget: int, parallel: int = 1, sleep_scale: float = 0.0
) -> StudyResult:
    """One study through ``dvt-hpo run``, read back from its journal, its folder removed."""
    folder = scratch("dvt-lcbench-")
    try:
        doc = study_document(cell, task, seed, budget, folder, parallel, sleep_scale)
        wall_s, returncode = run_until_spent(
            doc, folder, paths=[HERE, REPO_ROOT], what=f"{cell} task {task} seed {seed}"
        )
        trials = read_trials(folder / "study.log", task, by_end=parallel > 1)
        return StudyResult(
            cell, task, seed, budget, wall_s, returncode, trials, "dvt", parallel, sleep_scale
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def replay(cell: str, task: str, seed: int, budget: int) -> StudyResult:
    """The same study replayed in this process (see :mod:`search_replay`)."""
    from search_replay import replay_study

    doc = study_document(cell, task, seed, budget, Path(tempfile.gettempdir()))
    rows, wall_s = replay_study(doc, task, budget, SURROGATE, SURROGATE_PARAMS)
    trials = tuple(
        Trial(
            r.number,
            r.state,
            r.epochs,
            r.value,
            float(SURROGATE.curve(task, r.params, r.epochs)["time"][-1]),
        )
        for r in rows
    )
    return StudyResult(cell, task, seed, budget, wall_s, 0, trials, engine="replay")


def same_search(a: StudyResult, b: StudyResult) -> bool:
    """Whether two runs of one study tried the same trials with the same outcomes."""
    key = [(t.number, t.state, t.epochs, t.value) for t in a.trials]
    return key == [(t.number, t.state, t.epochs, t.value) for t in b.trials]


def read_trials(journal: Path, task: str, *, by_end: bool = False) -> tuple[Trial, ...]:
    """The study's trials by number, or (``by_end``, several at a time) in the order they
    ended: the report counts a trial's epochs as spent, and its value as found, when it ends."""
    from dvt_hpo.store.opening import StudyAt

    study = StudyAt(f"journal:///{journal}", "lcbench").load().study
    out = []
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    if by_end:
        trials.sort(key=lambda t: (t.datetime_complete is None, t.datetime_complete or 0))
    for t in trials:
        epochs = len(t.intermediate_values)
        if epochs == 0:
            continue  # the trial that found the budget spent
        hp = {k: t.params[k] for k in SURROGATE_PARAMS}
        time_s = float(SURROGATE.curve(task, hp, epochs)["time"][-1])
        value = t.value if t.state.name == "COMPLETE" else None
        out.append(Trial(t.number, t.state.name, epochs, value, time_s))
    return tuple(out)


def result_path(results: Path, cell: str, task: str, seed: int) -> Path:
    return results / cell / f"{task}-{seed}.json"


def with_provenance(result: StudyResult) -> StudyResult:
    """The result with the sampler and pruner its study file resolves to, and the commit."""
    if result.commit:
        return result
    doc = study_document(
        result.cell,
        result.task,
        result.seed,
        result.budget_epochs,
        Path(tempfile.gettempdir()),
        result.parallel,
        result.sleep_scale,
    )
    sampler, pruner = result_files.resolved(doc)
    return replace(result, sampler=sampler, pruner=pruner, commit=result_files.commit())


def save(results: Path, result: StudyResult) -> None:
    if result_files.is_packed(results):
        raise RuntimeError(f"{results} is a packed grid, read-only: run into a folder")
    result = with_provenance(result)
    path = result_path(results, result.cell, result.task, result.seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(result)))
    tmp.replace(path)


def load(path: Path) -> StudyResult:
    return from_json(json.loads(path.read_text()))


def from_json(raw: dict[str, Any]) -> StudyResult:
    raw = dict(raw)
    raw["trials"] = tuple(Trial(**t) for t in raw["trials"])
    return StudyResult(**raw)


def load_cells(results: Path, cells: list[str]) -> list[StudyResult]:
    """Every study of ``cells`` in ``results`` (a folder, or a packed grid), cell by cell."""
    rows = result_files.read(results)
    return [from_json(rows[name]) for cell in cells for name in rows if name.startswith(f"{cell}/")]


def _checked(item: tuple[str, str, int], budget: int) -> StudyResult:
    """The study through dvt-hpo run, after checking that its replay is the same search."""
    result = run_study(*item, budget)
    again = replay(*item, budget)
    if not same_search(result, again):
        raise RuntimeError(
            f"{item}: the replay differs from dvt-hpo run; use --engine dvt for this grid"
        )
    return result


def aliases(cells: list[str], budget: int) -> dict[str, str]:
    """Cells whose study file resolves to the same sampler and pruner as an earlier cell (as
    ``default`` does to the cell of dvt-hpo's defaults): each maps to that cell. Their studies
    are the same search, so they are run once and saved under both names."""
    from dvt_hpo.studyfile import load_spec

    seen: dict[str, Any] = {}
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "study.yaml"
        for cell in cells:
            doc = study_document(cell, SURROGATE.tasks[0], 0, budget, Path(folder))
            path.write_text(yaml.safe_dump(doc))
            spec = load_spec(path)
            # Arguments in any order (the study file's keys are written sorted).
            key = repr(
                [
                    (a.kind, sorted(a.kwargs.items()))
                    for a in (spec.study.sampler, spec.study.pruner)
                ]
            )
            if key in seen:
                out[cell] = seen[key]
            else:
                seen[key] = cell
    return out


def run_grid(
    cells: list[str],
    tasks: list[str],
    seeds: list[int],
    budget: int,
    results: Path,
    jobs: int,
    engine: str = "dvt",
    check: int = 0,
    out: Any = print,
    parallel: int = 1,
    sleep_scale: float = 0.0,
) -> None:
    """Run the studies missing from ``results``; seeds outermost, so that a grid cut short
    still has every cell on the same tasks and seeds. ``check``: with the replay engine, the
    first ``check`` studies (spread over the cells) run through dvt-hpo run and must equal
    their replay."""
    same = aliases(cells, budget)
    copies: dict[str, list[str]] = {}
    for alias, cell in same.items():
        copies.setdefault(cell, []).append(alias)
        out(f"{alias} resolves to the sampler and pruner of {cell}: its studies are copied")

    def keep(result: StudyResult) -> None:
        save(results, result)
        for alias in copies.get(result.cell, ()):
            save(results, replace(result, cell=alias))

    for s in seeds:  # an alias missing where its cell is done (a grid cut short)
        for t in tasks:
            for alias, cell in same.items():
                done = result_path(results, cell, t, s)
                if done.exists() and not result_path(results, alias, t, s).exists():
                    save(results, replace(load(done), cell=alias))
    todo = [
        (c, t, s)
        for s in seeds
        for t in tasks
        for c in cells
        if c not in same and not result_path(results, c, t, s).exists()
    ]
    out(
        f"{len(todo)} studies to run ({len(cells) - len(same)} cells x {len(tasks)} tasks x "
        f"{len(seeds)} seeds, {jobs} at a time, engine {engine}), results in {results}"
    )
    start = time.perf_counter()
    checked = todo[:check] if engine == "replay" else []
    if checked:
        with ThreadPoolExecutor(max_workers=jobs) as threads:
            for result in threads.map(lambda item: _checked(item, budget), checked):
                keep(result)
        out(
            f"  {len(checked)} studies through dvt-hpo run: each the same search as its "
            f"replay ({time.perf_counter() - start:.0f} s)"
        )
        todo = todo[check:]
    pool: Executor = (
        ProcessPoolExecutor(max_workers=jobs)
        if engine == "replay"
        else ThreadPoolExecutor(max_workers=jobs)
    )
    with pool:
        futures = [
            pool.submit(replay, *item, budget)
            if engine == "replay"
            else pool.submit(run_study, *item, budget, parallel, sleep_scale)
            for item in todo
        ]
        failed = 0
        for i, future in enumerate(as_completed(futures), 1):
            try:
                result = future.result()
            except RuntimeError as exc:  # said, and the others kept: a rerun retries it
                failed += 1
                out(f"  failed: {exc}")
                continue
            keep(result)
            if i % 50 == 0 or i == len(todo) or engine == "dvt" and i % 10 == 0:
                out(
                    f"  {i}/{len(todo)} done, {time.perf_counter() - start:.0f} s; last: "
                    f"{result.cell} task {result.task} seed {result.seed}: "
                    f"{len(result.trials)} trials in {result.wall_s:.1f} s"
                )
    if failed:
        raise RuntimeError(f"{failed} of {len(todo)} studies failed (above); rerun to retry them")


SURROGATE = Surrogate()
SURROGATE_PARAMS = tuple(d.name for d in SURROGATE.dimensions)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help="3 tasks, 2 seeds, 3 cells, every study through dvt-hpo run and its replay",
    )
    p.add_argument("--screen", action="store_true", help="every cell on every 5th task")
    p.add_argument(
        "--cells",
        help=f"comma-separated cells (sampler+pruner or default) or groups ({', '.join(CELL_GROUPS)})",
    )
    p.add_argument(
        "--tasks",
        help="'all', 'spread' (every 4th of the 34, the first 8: the screen's) or comma-separated "
        "OpenML task ids",
    )
    p.add_argument("--ntasks", type=int, help="N tasks spread evenly over the 34")
    p.add_argument("--task-step", type=int, help="every k-th of the 34 tasks")
    p.add_argument("--seeds", type=int, help="seeds 0..N-1")
    p.add_argument("--budget", type=int, help="full trainings' worth of epochs (30; --quick: 10)")
    p.add_argument("--jobs", type=int, default=2, help="studies at a time")
    p.add_argument(
        "--parallel",
        type=int,
        default=1,
        help="trials at a time in each study (trials.parallel; --engine dvt only)",
    )
    p.add_argument(
        "--sleep-scale",
        type=float,
        help=f"each epoch sleeps the surrogate's time x this ({PARALLEL_SLEEP_SCALE} with "
        "--parallel > 1, else 0)",
    )
    p.add_argument("--results", type=Path, help="folder of per-study JSON (kept for reruns)")
    p.add_argument("--plot", type=Path, help="PNG of regret against epochs (e.g. docs/x.png)")
    p.add_argument("--report-only", action="store_true", help="tables from --results only")
    p.add_argument(
        "--engine",
        choices=("dvt", "replay"),
        default="dvt",
        help="dvt: every study through dvt-hpo run; replay: in one process (search_replay)",
    )
    p.add_argument(
        "--check", type=int, default=0, help="with --engine replay: N studies run both ways"
    )
    args = p.parse_args(argv)

    import search_efficiency_report as report

    tasks_all = list(SURROGATE.tasks)
    if args.quick:
        # Every study through dvt-hpo run, each checked against its replay.
        cells, tasks, seeds = list(QUICK_CELLS), list(QUICK_TASKS), 2
        args.engine, args.check = "replay", len(cells) * len(tasks) * seeds
        if args.budget is None:
            args.budget = QUICK_BUDGET
    elif args.screen:
        cells = all_cells()
        tasks, seeds = tasks_all[::SCREEN_STEP], 2
    else:
        cells, tasks, seeds = all_cells(), tasks_all, 5
    if args.cells:
        cells = [c for name in args.cells.split(",") for c in CELL_GROUPS.get(name, (name,))]
    if args.tasks:
        tasks = (
            tasks_all
            if args.tasks == "all"
            else spread_tasks(tasks_all)
            if args.tasks == "spread"
            else args.tasks.split(",")
        )
    if args.ntasks:
        n = args.ntasks
        tasks = [tasks_all[round(i * (len(tasks_all) - 1) / max(1, n - 1))] for i in range(n)]
    if args.task_step:
        tasks = tasks_all[:: args.task_step]
    if args.parallel > 1:
        if args.engine == "replay" or args.quick:
            p.error("--parallel > 1 runs through dvt-hpo run only (the replay is one at a time)")
        if not args.tasks and not args.ntasks and not args.task_step:
            tasks = spread_tasks(tasks_all)
    if args.sleep_scale is None:
        args.sleep_scale = PARALLEL_SLEEP_SCALE if args.parallel > 1 else 0.0
    if args.seeds is not None:
        seeds = args.seeds
    for cell in cells:
        if cell != DEFAULT_CELL and (
            "+" not in cell
            or cell.split("+")[0] not in SAMPLERS
            or cell.split("+")[1] not in PRUNERS
        ):
            p.error(f"unknown cell {cell!r} (sampler+pruner of {list(SAMPLERS)} x {list(PRUNERS)})")
    results = args.results or Path(tempfile.mkdtemp(prefix="search-efficiency-"))
    if result_files.is_packed(results) and not args.report_only:
        p.error(
            f"--results {results} is a packed grid, read-only: add --report-only, or unpack it "
            "into a folder (result_files.py unpack) to run more studies"
        )
    budget = (args.budget or FULL_BUDGET) * MAX_EPOCHS
    if not args.report_only:
        run_grid(
            cells,
            tasks,
            list(range(seeds)),
            budget,
            results,
            args.jobs,
            args.engine,
            args.check,
            parallel=args.parallel,
            sleep_scale=args.sleep_scale,
        )
    found = [r for r in load_cells(results, cells) if r.task in tasks and r.seed < seeds]
    # Only the (task, seed) pairs every cell has: a grid cut short compares like with like.
    have: dict[tuple[str, int], set[str]] = {}
    for r in found:
        have.setdefault((r.task, r.seed), set()).add(r.cell)
    runs = [r for r in found if len(have[(r.task, r.seed)]) == len(set(cells))]
    print(report.render(runs, SURROGATE, budget, plots=args.plot))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
