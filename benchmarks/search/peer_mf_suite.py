"""SMAC3's Hyperband and DEHB on the search suite (every family, the suite's halves, seeds and
budget), each through its ask-and-tell interface in simulated time; the results are suite rows,
so ``suite_report.py`` reads them beside dvt-hpo's cells and Syne Tune's.

    python3.11 -m venv .venv-smac
    .venv-smac/bin/pip install smac dehb onnxruntime numpy pyyaml scipy
    PYTHONPATH=$PWD .venv-smac/bin/python benchmarks/search/peer_mf_suite.py \\
        --grid report-r9-smac-dehb --half report --seeds 3 --cells smac-hb,dehb

Cells: ``smac-hb``: ``smac.HyperbandFacade`` (SMAC3 2.x: Hyperband's brackets of successive
halving over random configs, the first config the space's default), ``eta=3``, ``min_budget=1``,
``max_budget`` = the family's steps, ``deterministic=True`` (the curves are), ``seed`` = the
study's seed, SMAC's defaults otherwise. ``dehb``: ``dehb.DEHB`` (differential evolution within
Hyperband's brackets), ``min_fidelity=1``, ``max_fidelity`` = the family's steps, ``seed`` = the
study's seed, its defaults otherwise (``eta=3``, ``mutation_factor=0.5``, ``crossover_prob=0.5``,
``strategy="rand1_bin"``, ``async_strategy="immediate"``); it writes nothing to disk
(``save_freq="end"``, and the run never ends through ``run``). A cell name ending in ``@4`` runs
4 trials at a time (both tools ask for a new config while others are still training).

Both tools ask for a (config, budget) with a real-valued budget on Hyperband's geometric grid
(``max * 3**-k``: 1.93, 5.78, 17.3 and 52 on LCBench's 52 epochs; 1.11, 3.33 and 10 on 10
steps); a trial trains the nearest whole number of steps, at least 1, and the tool is told the
family's metric after that step (SMAC minimizes ``-value``, DEHB's fitness is ``-value`` and its
cost the steps). Neither tool resumes a trial: a config promoted to a higher budget is trained
again from its first step, and the budget counts all those steps again.

The budget is counted as ``peer_syne_suite.py`` counts it (its ``Stretches``): every step any
trial trains, in the order they end (each step one simulated second), refused past the budget. A
row is one training: ``COMPLETE`` with its value when it reached the family's last step,
``PRUNED`` with no value when the tool asked for fewer steps (the suite's regret counts only
values of trainings that completed, as for every other cell), ``RUNNING`` when the budget ended
it. Every told value, full budget or not, is kept in the study's ``evaluations`` (row number,
config number, steps, value). A conditional dimension (the built-in trainer's ``momentum``) is
always drawn and dropped where its ``when:`` does not hold, as in ``peer_syne_suite.py``.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from families import family  # noqa: E402
from peer_syne_suite import Stretches, grid_parser, params_of, run_grid, split_cell  # noqa: E402

# Cell -> (the tool, what it samples as the row names it, what it prunes with).
CELLS: dict[str, tuple[str, str, str]] = {
    "smac-hb": ("smac", "smac: random (HyperbandFacade)", "smac: Hyperband"),
    "dehb": ("dehb", "dehb: differential evolution", "dehb: Hyperband brackets"),
}
ETA = 3  # both tools' default


class Tool(Protocol):
    """One of the tools, asked and told one training at a time."""

    def ask(self) -> tuple[Any, dict[str, Any], float]:
        """(the tool's handle of the trial, its config, its budget in steps)."""
        ...

    def tell(self, handle: Any, value: float, steps: int) -> None: ...


def configuration_space(space: list[dict[str, Any]], seed: int) -> Any:
    """The family's search space in ConfigSpace's terms (no conditions: a ``when:`` dimension is
    always drawn, then dropped by ``params_of``)."""
    from ConfigSpace import Categorical, ConfigurationSpace, Float, Integer

    cs = ConfigurationSpace(seed=seed)
    for d in space:
        if "choices" in d:
            cs.add(Categorical(d["name"], list(d["choices"])))
        elif d["kind"] == "int":
            cs.add(Integer(d["name"], (int(d["low"]), int(d["high"])), log=bool(d.get("log"))))
        else:
            cs.add(Float(d["name"], (float(d["low"]), float(d["high"])), log=bool(d.get("log"))))
    return cs


def plain(space: list[dict[str, Any]], config: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's config in the family's own types: ConfigSpace hands back numpy scalars, and a
    categorical must be one of the family's choices (an ``int`` width, not ``np.int64``)."""
    out: dict[str, Any] = {}
    for d in space:
        v = config[d["name"]]
        if "choices" in d:
            out[d["name"]] = next(c for c in d["choices"] if c == v or str(c) == str(v))
        elif d["kind"] == "int":
            out[d["name"]] = int(v)
        else:
            out[d["name"]] = float(v)
    return out


def whole_steps(budget: float, steps: int) -> int:
    """The steps a trial trains for a tool's real-valued budget: the nearest whole number, within
    1 .. the family's steps."""
    return min(steps, max(1, int(round(budget))))


class Smac:
    """SMAC3's Hyperband, asked and told (its target function is never called)."""

    def __init__(self, space: list[dict[str, Any]], steps: int, seed: int, folder: Path) -> None:
        from smac import HyperbandFacade, Scenario

        scenario = Scenario(
            configuration_space(space, seed),
            name="suite",
            output_directory=folder / "smac",
            deterministic=True,
            n_trials=10**9,  # the suite's budget of steps ends the study, not SMAC
            min_budget=1,
            max_budget=steps,
            seed=seed,
        )

        def never(config: Any, seed: int = 0, budget: float = 0.0) -> float:
            raise RuntimeError("asked and told: SMAC never runs the target itself")

        self.space = space
        self.smac = HyperbandFacade(
            scenario,
            never,
            intensifier=HyperbandFacade.get_intensifier(scenario, eta=ETA),
            overwrite=True,
            logging_level=logging.ERROR,
        )

    def ask(self) -> tuple[Any, dict[str, Any], float]:
        info = self.smac.ask()
        return info, plain(self.space, dict(info.config)), float(info.budget)

    def tell(self, handle: Any, value: float, steps: int) -> None:
        from smac.runhistory.dataclasses import TrialValue

        self.smac.tell(handle, TrialValue(cost=-value, time=float(steps)))


class Dehb:
    """DEHB, asked and told (no Dask client: one process, the parallelism simulated)."""

    def __init__(self, space: list[dict[str, Any]], steps: int, seed: int, folder: Path) -> None:
        from dehb import DEHB

        self.space = space
        self.dehb = DEHB(
            cs=configuration_space(space, seed),
            min_fidelity=1,
            max_fidelity=steps,
            eta=ETA,
            n_workers=1,  # no Dask: the trials' parallelism is simulated here
            seed=seed,
            output_path=str(folder / "dehb"),
            save_freq="end",
            log_level="ERROR",
        )

    def ask(self) -> tuple[Any, dict[str, Any], float]:
        job = self.dehb.ask()  # with a ConfigSpace space, its config is a Configuration
        return job, plain(self.space, dict(job["config"])), float(job["fidelity"])

    def tell(self, handle: Any, value: float, steps: int) -> None:
        self.dehb.tell(handle, {"fitness": -value, "cost": float(steps)})


@dataclass
class Training:
    """One (config, steps) a tool asked for, trained from its first step."""

    number: int
    handle: Any
    config: int  # the config's number, in the order configs were first asked for
    steps: int
    curve: np.ndarray


def simulate(
    tool: Tool, fam: str, task: str, workers: int, log: Stretches
) -> tuple[list[list[Any]], int]:
    """Train what ``tool`` asks for, ``workers`` trainings at a time, each step one simulated
    second, every step through ``log`` in the order the steps end (ties: in the order they were
    scheduled), until the budget is spent; the told evaluations, and how many configs were
    trained."""
    f = family(fam)
    space = f.search_space()
    configs: dict[tuple[tuple[str, Any], ...], int] = {}
    evaluations: list[list[Any]] = []
    order, numbers = itertools.count(), itertools.count()
    pending: list[tuple[int, int, int, Training]] = []  # (end of the step, order, step, training)

    def launch(now: int) -> None:
        handle, config, budget = tool.ask()
        params = params_of(space, config)
        key = tuple(sorted(params.items()))
        number = configs.setdefault(key, len(configs))
        curve = np.asarray(f.curve(task, params), dtype=float)
        t = Training(next(numbers), handle, number, whole_steps(budget, f.steps), curve)
        heapq.heappush(pending, (now + 1, next(order), 1, t))

    for _ in range(workers):
        launch(0)
    while pending and not log.exhausted:
        now, _, step, t = heapq.heappop(pending)
        value = float(t.curve[step - 1])
        log.result(str(t.number), step, value, "STOP" if step == t.steps else "CONTINUE")
        if log.exhausted:
            break
        if step < t.steps:
            heapq.heappush(pending, (now + 1, next(order), step + 1, t))
            continue
        tool.tell(t.handle, value, t.steps)
        evaluations.append([t.number, t.config, t.steps, value])
        launch(now)
    return evaluations, len(configs)


def run_study(cell: str, fam: str, task: str, seed: int, budget_x: int) -> dict[str, Any]:
    name, workers = split_cell(cell)
    engine, sampler, pruner = CELLS[name]
    f = family(fam)
    log = Stretches(budget_x * f.steps, f.steps)
    folder = Path(tempfile.mkdtemp(prefix=f"dvt-peer-{engine}-"))
    start = time.perf_counter()
    try:
        space = f.search_space()
        tool: Tool = (Smac if engine == "smac" else Dehb)(space, f.steps, seed, folder)
        evaluations, configs = simulate(tool, fam, task, workers, log)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    wall = time.perf_counter() - start
    settings = {"eta": ETA, "min_budget": 1, "max_budget": f.steps, "steps": "round(budget)"}
    return {
        "engine": engine,
        "version": version(engine),
        # Neither tool resumes a training: no continuations.
        **log.study_fields(f"{cell} {fam} {task} seed {seed}", wall, workers),
        "configs": configs,
        "evaluations": evaluations,
        "sampler": {"kind": sampler, "seed": seed},
        "pruner": {"kind": pruner, **settings},
    }


def version(engine: str) -> str:
    from importlib.metadata import version as installed

    return installed("smac" if engine == "smac" else "dehb")


def main(argv: list[str] | None = None) -> int:
    args = grid_parser(__doc__ or "", list(CELLS), "smac-hb,dehb").parse_args(argv)
    # SMAC and DEHB log through the standard logging and loguru; their warnings are not results.
    logging.getLogger("smac").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    engines = ", ".join(f"{e} {version(e)}" for e in ("smac", "dehb"))
    return run_grid(args, run_study, engines, known=lambda c: split_cell(c)[0] in CELLS)


if __name__ == "__main__":
    raise SystemExit(main())
