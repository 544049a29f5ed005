"""Syne Tune's ASHA, BOHB and MOBSTER on the search suite (every family, the suite's halves,
seeds and budget), in Syne Tune's simulator; the results are suite rows, so ``suite_report.py``
reads them beside dvt-hpo's cells.

    python3.11 -m venv .venv-syne
    .venv-syne/bin/pip install 'syne-tune==0.13.0' onnxruntime numpy pyyaml \\
        scikit-learn scipy autograd statsmodels
    PYTHONPATH=$PWD .venv-syne/bin/python benchmarks/search/peer_syne_suite.py \\
        --grid report-r8-syne --half report --seeds 5 --cells syne-asha-promotion
    PYTHONPATH=$PWD .venv-syne/bin/python benchmarks/search/peer_syne_suite.py \\
        --grid report-r9-syne-bohb-mobster --half report --seeds 3 --cells syne-bohb,syne-mobster

Cells: ``syne-asha-promotion``: ``syne_tune.optimizer.baselines.ASHA`` with
``type="promotion"`` (a trial pauses at each rung and is resumed from where it paused when it
ranks in the top ``1 / reduction_factor`` there: the rule ``trials.pause`` takes over);
``syne-asha``: the same with ``type="stopping"``. Both random search. ``syne-bohb``:
``baselines.BOHB`` (ASHA's stopping rule, configs from Syne Tune's multi-fidelity KDE searcher);
``syne-mobster``: ``baselines.MOBSTER`` (the same rule, configs from its multi-task GP searcher,
``gp_multitask``), both ``type="stopping"``. Every cell Syne Tune's defaults otherwise
(``grace_period=1``, ``reduction_factor=3``, ``brackets=1``, the searchers' own settings),
``max_t`` = the family's steps, ``mode="max"``, ``random_seed`` = the study's seed. A cell name
ending in ``@4`` runs the same scheduler with 4 trials at a time (``n_workers=4``). Syne Tune's
simulator imports scikit-learn, BOHB's searcher statsmodels, MOBSTER's autograd and scipy: none
comes with ``syne-tune`` itself, hence the second line of the install.

A family is a Syne Tune ``Blackbox`` (the family's curve; each step one simulated second: with one
trial at a time only the order matters), run by ``UserBlackboxBackend`` (checkpointing on: a
resumed trial reports only the steps after its pause) under the ``SimulatorCallback``. A
conditional dimension (the built-in trainer's ``momentum``) is always drawn and dropped where its
``when:`` does not hold. The budget is counted as the suite counts it: every step any trial
trains, in the order the tuner sees them, refused past the budget. A row is one stretch of
training: a trial until it pauses (``PAUSED``), is stopped (``PRUNED``), completes, or the budget
ends (``RUNNING``); a resumed trial's stretch adds the trial's number as a fifth field (a
continuation, as dvt-hpo's pause cells record theirs).
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import result_files  # noqa: E402
from families import FAMILIES, family, halves_of  # noqa: E402
from split import read_split  # noqa: E402

# Cell -> (the scheduler in syne_tune.optimizer.baselines, its searcher as the row names it, type).
CELLS: dict[str, tuple[str, str, str]] = {
    "syne-asha-promotion": ("ASHA", "random", "promotion"),
    "syne-asha": ("ASHA", "random", "stopping"),
    "syne-bohb": ("BOHB", "BOHB (KDE)", "stopping"),
    "syne-mobster": ("MOBSTER", "MOBSTER (GP)", "stopping"),
}
# The signature of a runner's study: (cell, family, task, seed, budget in full trainings) -> the
# row's fields beyond family, task, half, cell, seed, budget, fidelity and commit.
Study = Callable[[str, str, str, int, int], dict[str, Any]]
FULL_BUDGET = 30  # suite.FULL_BUDGET
STEP = "epoch"
ELAPSED = "elapsed_time"
METRIC = "value"
RESULTS = HERE / "results"


def config_space(space: list[dict[str, Any]]) -> dict[str, Any]:
    """The family's search space in Syne Tune's terms (integer bounds inclusive)."""
    from syne_tune.config_space import choice, lograndint, loguniform, randint, uniform

    out: dict[str, Any] = {}
    for d in space:
        if "choices" in d:
            out[d["name"]] = choice(list(d["choices"]))
        elif d["kind"] == "int":
            out[d["name"]] = (lograndint if d.get("log") else randint)(
                int(d["low"]), int(d["high"])
            )
        else:
            out[d["name"]] = (loguniform if d.get("log") else uniform)(
                float(d["low"]), float(d["high"])
            )
    return out


def params_of(space: list[dict[str, Any]], config: dict[str, Any]) -> dict[str, Any]:
    """The trial's params as the study would sample them: a ``when:`` dimension only where it
    holds."""
    out = {}
    for d in space:
        when = d.get("when")
        if when and any(config.get(k) != v for k, v in when.items()):
            continue
        out[d["name"]] = config[d["name"]]
    return out


def make_blackbox(fam: str, task: str) -> Any:
    from syne_tune.blackbox_repository.blackbox import Blackbox

    f = family(fam)
    space = f.search_space()

    class Suite(Blackbox):
        def __init__(self) -> None:
            super().__init__(
                configuration_space=config_space(space),
                fidelity_space={STEP: None},
                objectives_names=[METRIC, ELAPSED],
            )

        @property
        def fidelity_values(self) -> np.ndarray:
            return np.arange(1, f.steps + 1)

        def _objective_function(
            self, configuration: dict[str, Any], fidelity: Any = None, seed: Any = None
        ) -> Any:
            curve = np.asarray(f.curve(task, params_of(space, configuration)), dtype=float)
            table = np.stack([curve, np.arange(1, f.steps + 1, dtype=float)], axis=1)
            if fidelity is None:
                return table
            row = table[int(fidelity[STEP]) - 1]
            return {METRIC: row[0], ELAPSED: row[1]}

    return Suite()


class Stretches:
    """The steps the tuner reports, cut at the budget, as suite rows (one per stretch)."""

    def __init__(self, budget: int, steps: int) -> None:
        self.budget, self.steps = budget, steps
        self.spent = 0
        self.number: dict[str, int] = {}  # trial id -> number, in the order they first report
        self.reached: dict[str, int] = {}  # the last step counted
        self.open: dict[str, list[Any]] = {}  # the stretch in progress
        self.paused: set[str] = set()
        self.rows: list[list[Any]] = []

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.budget

    def result(self, trial: str, step: int, value: float, decision: str) -> None:
        if self.exhausted or step != self.reached.get(trial, 0) + 1:
            return  # past the budget, or a report repeated
        self.number.setdefault(trial, len(self.number))
        if trial not in self.open:
            n = self.number[trial]
            self.open[trial] = [n, "RUNNING", 0, None] + ([n] if trial in self.paused else [])
        row = self.open[trial]
        row[2] += 1
        self.spent += 1
        self.reached[trial] = step
        if step >= self.steps:
            row[1], row[3] = "COMPLETE", float(value)
        elif decision == "PAUSE":
            row[1] = "PAUSED"
            self.paused.add(trial)
        elif decision == "STOP":
            row[1] = "PRUNED"
        else:
            return
        self.rows.append(self.open.pop(trial))

    def all_rows(self) -> list[list[Any]]:
        """The stretches that ended, in order, then those the budget cut."""
        return [*self.rows, *self.open.values()]

    def study_fields(self, study: str, wall_s: float, workers: int) -> dict[str, Any]:
        """What every peer's result line records of a study (its rows, the steps they trained,
        the continuations); a study the tool left before its budget was spent is refused."""
        if not self.exhausted:
            raise RuntimeError(f"{study}: the tool stopped before the budget was spent")
        trials = self.all_rows()
        return {
            "wall_s": round(wall_s, 2),
            "trials": trials,
            "epochs": sum(t[2] for t in trials),
            "continuations": sum(1 for t in trials if len(t) > 4),
            "parallel": workers,
        }


def split_cell(cell: str) -> tuple[str, int]:
    """``syne-bohb@4`` -> (``syne-bohb``, 4); a name without ``@`` runs one trial at a time."""
    name, _, workers = cell.partition("@")
    return name, int(workers or 1)


def run_study(cell: str, fam: str, task: str, seed: int, budget_x: int) -> dict[str, Any]:
    from syne_tune import Tuner
    from syne_tune.backend.simulator_backend.simulator_callback import SimulatorCallback
    from syne_tune.blackbox_repository.simulated_tabular_backend import UserBlackboxBackend
    from syne_tune.optimizer import baselines
    from syne_tune.tuner_callback import TunerCallback

    name, workers = split_cell(cell)
    scheduler_name, searcher, kind = CELLS[name]
    f = family(fam)
    log = Stretches(budget_x * f.steps, f.steps)

    class Count(TunerCallback):
        def on_trial_result(self, trial: Any, status: str, result: Any, decision: str) -> None:
            log.result(str(trial.trial_id), int(result[STEP]), float(result[METRIC]), decision)

    folder = tempfile.mkdtemp(prefix="dvt-peer-syne-")
    os.environ["SYNETUNE_FOLDER"] = folder
    blackbox = make_blackbox(fam, task)
    start = time.perf_counter()
    try:
        scheduler = getattr(baselines, scheduler_name)(
            blackbox.configuration_space,
            metric=METRIC,
            mode="max",
            resource_attr=STEP,
            max_t=f.steps,
            type=kind,
            random_seed=seed,
        )
        tuner = Tuner(
            trial_backend=UserBlackboxBackend(blackbox=blackbox, elapsed_time_attr=ELAPSED),
            scheduler=scheduler,
            stop_criterion=lambda status: log.exhausted,
            n_workers=workers,
            sleep_time=0,
            results_update_interval=1e9,
            print_update_interval=1e9,
            callbacks=[SimulatorCallback(), Count()],
            save_tuner=False,
            # Syne Tune takes letters, digits and dashes only.
            tuner_name=f"{cell}-{fam}-{task}-{seed}".replace("_", "-").replace("@", "-at"),
        )
        tuner.run()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    wall = time.perf_counter() - start
    return {
        "engine": "syne-tune",
        **log.study_fields(f"{cell} {fam} {task} seed {seed}", wall, workers),
        "sampler": {"kind": f"syne-tune: {searcher}"},
        "pruner": {"kind": f"syne-tune: HyperbandScheduler ({kind})"},
    }


def grid_parser(doc: str, cells: list[str], default: str) -> argparse.ArgumentParser:
    """The command line every suite peer runner takes (``peer_mf_suite.py`` too)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--grid", help="results file name (results/<grid>.jsonl.gz)")
    p.add_argument("--results", type=Path, help="the results file instead")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--half", choices=("selection", "report"), default="report")
    p.add_argument("--tasks", type=int, help="the first N tasks of each half (split.json order)")
    p.add_argument(
        "--cells", default=default, help=f"comma-separated: {cells}, each also as NAME@4"
    )
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--budget", type=int, default=FULL_BUDGET, help="full trainings' worth")
    p.add_argument(
        "--shard",
        type=shard,
        default=(0, 1),
        help="K/N: only the K-th of every N studies still to run, so N processes (each with its "
        "own --results file) share a grid",
    )
    return p


def shard(text: str) -> tuple[int, int]:
    """``K/N`` with 0 <= K < N, for ``--shard``."""
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and int(k) < int(n)):
        raise argparse.ArgumentTypeError(f"{text!r} is not K/N with 0 <= K < N")
    return int(k), int(n)


def run_grid(
    args: argparse.Namespace,
    study: Study,
    engine: str,
    skip: tuple[type[BaseException], ...] = (),
    known: Callable[[str], bool] = lambda cell: split_cell(cell)[0] in CELLS,
) -> int:
    """Every (family, task, cell, seed) of the command line not yet in the results file, one
    study after another, each appended as one gzip member (a run cut short resumes). A study
    that raises one of ``skip`` is left out and said."""
    if not args.grid and not args.results:
        raise SystemExit("--grid NAME or --results FILE")
    cells = args.cells.split(",")
    for cell in cells:
        if not known(cell):
            raise SystemExit(f"unknown cell {cell!r}")
    path = args.results or RESULTS / f"{args.grid}.jsonl.gz"
    done = {(r["family"], r["task"], r["cell"], r["seed"]) for r in result_files.read_rows(path)}
    split = read_split()
    todo = [
        (fam, task, cell, seed)
        for seed in range(args.seeds)
        for fam in args.families.split(",")
        for task in split[halves_of(fam)][args.half][: args.tasks]
        for cell in cells
        if (fam, task, cell, seed) not in done
    ][args.shard[0] :: args.shard[1]]
    print(f"{engine}: {len(todo)} studies, results in {path}", flush=True)
    sha, start = result_files.commit(), time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    failed = []
    for i, (fam, task, cell, seed) in enumerate(todo, 1):
        try:
            result = study(cell, fam, task, seed, args.budget)
        except skip as exc:
            failed.append((fam, task, cell, seed))
            print(f"  failed: {fam} {task} {cell} seed {seed}: {engine} raised {exc!r}")
            continue
        f = family(fam)
        row = {"family": fam, "task": task, "half": args.half, "cell": cell, "seed": seed}
        row |= {"budget": args.budget * f.steps, "fidelity": f.fidelity, "commit": sha, **result}
        with gzip.open(path, "at") as fh:  # one gzip member per study
            fh.write(json.dumps(row) + "\n")
        if i % 10 == 0 or i == len(todo):
            print(
                f"  {i}/{len(todo)}, {time.perf_counter() - start:.0f} s; {fam} {task} {cell} "
                f"seed {seed}: {len(result['trials'])} rows in {result['wall_s']:.1f} s",
                flush=True,
            )
    if failed:
        print(f"{len(failed)} of {len(todo)} studies failed in {engine} (left out): {failed}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = grid_parser(__doc__ or "", list(CELLS), "syne-asha-promotion").parse_args(argv)
    import syne_tune

    logging.getLogger("syne_tune").setLevel(logging.WARNING)
    # Syne Tune 0.13's promotion rungs assert now and then in the simulator ("resource = 5 > 3
    # milestone"): the study is left out (suite_report then compares the other cells without
    # its task and seed) and said.
    return run_grid(args, run_study, f"Syne Tune {syne_tune.__version__}", skip=(AssertionError,))


if __name__ == "__main__":
    raise SystemExit(main())
