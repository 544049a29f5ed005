"""Ray Tune's ASHA on the search suite (every family, the suite's halves, seeds and budget), Ray's
own scheduler and searcher objects driven in simulated time as ``peer_ray.py`` drives them on
LCBench; the results are suite rows, so ``suite_report.py`` reads them beside dvt-hpo's cells,
Syne Tune's, SMAC3's and DEHB's.

    python3.11 -m venv .venv-ray
    .venv-ray/bin/pip install 'ray[tune]' onnxruntime optuna numpy pyyaml
    PYTHONPATH=$PWD .venv-ray/bin/python benchmarks/search/peer_ray_suite.py \\
        --grid report-r9-ray --half report --seeds 3 --cells ray-asha-random

Cells: ``ray-asha-random``: ``ray.tune.schedulers.AsyncHyperBandScheduler`` with Ray's default
search, the ``BasicVariantGenerator``'s random sampling (``generate_variants`` with its
``_BackwardsCompatibleNumpyRng`` seeded with the study's seed, one variant per trial);
``ray-asha-optuna``: the same scheduler with ``OptunaSearch`` (Ray's wrapper of Optuna's TPE,
``seed`` = the study's seed). The scheduler with Ray's documented defaults (``grace_period=1``,
``reduction_factor=4``, ``brackets=1``), ``max_t`` = the family's steps, ``mode="max"`` on the
family's value over ``training_iteration`` (one report per step). ASHA's rule stops a trial (Ray
has no pause in ASHA), so no trial is ever resumed. A cell name ending in ``@4`` runs 4 trials at
a time.

The objects are called as Ray's ``TuneController`` calls them (``peer_ray.simulate_study``, whose
``--check`` runs studies through ``Tuner.fit`` too and requires the same trials): no Ray runtime,
so no per-trial start-up cost, and each step one simulated second, as in ``peer_mf_suite.py``
(with one trial at a time only the order matters). The budget is counted as
``peer_syne_suite.py`` counts it (its ``Stretches``): every step any trial trains, in the order
they end, refused past the budget. A row is one trial: ``COMPLETE`` with its value at the
family's last step, ``PRUNED`` when ASHA stopped it, ``RUNNING`` when the budget cut it. A
conditional dimension (the built-in trainer's ``momentum``) is always drawn and dropped where its
``when:`` does not hold (``peer_syne_suite.params_of``).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from families import family  # noqa: E402
from peer_syne_suite import Stretches, grid_parser, params_of, run_grid, split_cell  # noqa: E402

# Cell -> (what it samples as the row names it, what it prunes with).
CELLS: dict[str, tuple[str, str]] = {
    "ray-asha-random": ("ray: random (BasicVariantGenerator)", "ray: AsyncHyperBandScheduler"),
    "ray-asha-optuna": ("ray: OptunaSearch (TPE)", "ray: AsyncHyperBandScheduler"),
}
METRIC = "value"
TIME_ATTR = "training_iteration"  # Ray's default time_attr: one per report
# AsyncHyperBandScheduler's documented defaults, written out so the row records them.
ASHA = {"grace_period": 1, "reduction_factor": 4, "brackets": 1}


def param_space(space: list[dict[str, Any]]) -> dict[str, Any]:
    """The family's search space in Ray's terms (Ray's integer upper bounds are exclusive, the
    family's inclusive; no conditions: a ``when:`` dimension is always drawn)."""
    from ray import tune

    out: dict[str, Any] = {}
    for d in space:
        if "choices" in d:
            out[d["name"]] = tune.choice(list(d["choices"]))
        elif d["kind"] == "int":
            sample = tune.lograndint if d.get("log") else tune.randint
            out[d["name"]] = sample(int(d["low"]), int(d["high"]) + 1)
        else:
            sample = tune.loguniform if d.get("log") else tune.uniform
            out[d["name"]] = sample(float(d["low"]), float(d["high"]))
    return out


class Tool(Protocol):
    """Ray's scheduler and searcher, as the simulation calls them."""

    def start(self, trial: str) -> dict[str, Any]:
        """A new trial's config (every dimension of the space)."""
        ...

    def result(self, trial: str, step: int, value: float) -> bool:
        """Tell one step's value; whether the trial stops there."""
        ...


class _Trial:
    """What Ray's scheduler reads of a trial: its id (``peer_ray._Trial``)."""

    def __init__(self, trial_id: str) -> None:
        self.trial_id = trial_id


class RayAsha:
    """``AsyncHyperBandScheduler`` and a searcher, called as ``TuneController`` calls them
    (``_process_trial_result``, ``stop_trial``; ``peer_ray.simulate_study``)."""

    def __init__(self, cell: str, space: list[dict[str, Any]], steps: int, seed: int) -> None:
        from ray.tune.schedulers import AsyncHyperBandScheduler
        from ray.tune.search.basic_variant import _BackwardsCompatibleNumpyRng
        from ray.tune.search.optuna import OptunaSearch

        self.scheduler = AsyncHyperBandScheduler(time_attr=TIME_ATTR, max_t=steps, **ASHA)
        self.scheduler.set_search_properties(METRIC, "max")
        self.space = param_space(space)
        self.searcher: Any = None
        if cell == "ray-asha-optuna":
            import optuna

            # Optuna logs each study's creation at INFO; one per study, none a result.
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            self.searcher = OptunaSearch(metric=METRIC, mode="max", seed=seed)
            self.searcher.set_search_properties(METRIC, "max", self.space)
        # BasicVariantGenerator(random_state=seed) wraps the seed in this and draws every
        # variant from it.
        self.rng = _BackwardsCompatibleNumpyRng(seed)
        self.trials: dict[str, _Trial] = {}

    def start(self, trial: str) -> dict[str, Any]:
        from ray.tune.search.variant_generator import generate_variants

        if self.searcher is not None:
            config = self.searcher.suggest(trial)
        else:  # BasicVariantGenerator's sampling: one variant of the space per trial
            _, spec = next(generate_variants({"config": self.space}, random_state=self.rng))
            config = spec["config"]
        self.trials[trial] = _Trial(trial)
        self.scheduler.on_trial_add(None, self.trials[trial])
        return dict(config)

    def result(self, trial: str, step: int, value: float) -> bool:
        report = {METRIC: value, TIME_ATTR: step, "trial_id": trial}
        decision = self.scheduler.on_trial_result(None, self.trials[trial], report)
        if decision != "STOP":
            if self.searcher is not None:
                self.searcher.on_trial_result(trial, report)
            return False
        self.scheduler.on_trial_complete(None, self.trials[trial], report)
        if self.searcher is not None:
            self.searcher.on_trial_complete(trial, result=report)
        return True


@dataclass
class Running:
    """A trial in training: its id and the family's curve for its params."""

    trial: str
    curve: np.ndarray


def simulate(
    tool: Tool, curve: Callable[[dict[str, Any]], np.ndarray], workers: int, log: Stretches
) -> int:
    """Train the trials ``tool`` starts, ``workers`` at a time, each step one simulated second,
    every step told to ``tool`` and counted in ``log`` in the order the steps end (ties: in the
    order they were scheduled), until the budget is spent; how many trials were started.
    ``curve(config)`` is the family's curve for a config as the tool drew it."""
    order, numbers = itertools.count(), itertools.count()
    pending: list[tuple[int, int, int, Running]] = []  # (end of the step, order, step, trial)

    def launch(now: int) -> None:
        trial = f"t{next(numbers):05d}"
        config = tool.start(trial)
        heapq.heappush(pending, (now + 1, next(order), 1, Running(trial, curve(config))))

    for _ in range(workers):
        launch(0)
    while pending and not log.exhausted:
        now, _, step, t = heapq.heappop(pending)
        value = float(t.curve[step - 1])
        # The scheduler decides before the step is counted, so a stop lands in the row (a
        # trial at its last step is stopped by ASHA's max_t, and completes in the row).
        stop = tool.result(t.trial, step, value) or step >= len(t.curve)
        log.result(t.trial, step, value, "STOP" if stop else "CONTINUE")
        if log.exhausted:
            break
        if stop:
            launch(now)
        else:
            heapq.heappush(pending, (now + 1, next(order), step + 1, t))
    return next(numbers)


def run_study(cell: str, fam: str, task: str, seed: int, budget_x: int) -> dict[str, Any]:
    name, workers = split_cell(cell)
    sampler, pruner = CELLS[name]
    f = family(fam)
    space = f.search_space()
    log = Stretches(budget_x * f.steps, f.steps)

    def curve(config: dict[str, Any]) -> np.ndarray:
        return np.asarray(f.curve(task, params_of(space, config)), dtype=float)

    start = time.perf_counter()
    started = simulate(RayAsha(name, space, f.steps, seed), curve, workers, log)
    wall = time.perf_counter() - start
    return {
        "engine": "ray-tune",
        "version": version(),
        # ASHA in Ray stops trials, it never resumes one: no continuations.
        **log.study_fields(f"{cell} {fam} {task} seed {seed}", wall, workers),
        "configs": started,
        "sampler": {"kind": sampler, "seed": seed},
        "pruner": {"kind": pruner, "max_t": f.steps, "time_attr": TIME_ATTR, **ASHA},
    }


def version() -> str:
    from importlib.metadata import version as installed

    return installed("ray")


def main(argv: list[str] | None = None) -> int:
    args = grid_parser(__doc__ or "", list(CELLS), "ray-asha-random").parse_args(argv)
    # Ray warns about experimental APIs; no warning is a result.
    logging.getLogger("ray").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    return run_grid(args, run_study, f"Ray {version()}", known=lambda c: split_cell(c)[0] in CELLS)


if __name__ == "__main__":
    raise SystemExit(main())
