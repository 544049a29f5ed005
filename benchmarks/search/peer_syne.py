"""Syne Tune's ASHA, BOHB and MOBSTER on the LCBench surrogate, in Syne Tune's simulator.

    python3.11 -m venv .venv-syne
    .venv-syne/bin/pip install 'syne-tune[gpsearchers]==0.13.0' scikit-learn statsmodels onnxruntime
    PYTHONPATH=$PWD .venv-syne/bin/python benchmarks/search/peer_syne.py --workers 1
    PYTHONPATH=$PWD .venv-syne/bin/python benchmarks/search/peer_syne.py --workers 4

Cells: ``syne-asha``, ``syne-bohb``, ``syne-mobster``: ``syne_tune.optimizer.baselines``'
``ASHA`` (random search), ``BOHB`` (its KDE searcher) and ``MOBSTER`` (its GP multi-task
searcher), each with Syne Tune's defaults (``HyperbandScheduler``: ``type="stopping"``,
``grace_period=1``, ``reduction_factor=3``, ``brackets=1``) and ``max_t=52``, ``metric
val_accuracy``, ``mode="max"``, ``resource_attr="epoch"``, ``random_seed`` = the study's seed.
MOBSTER needs 0.13: 0.16 dropped it.

The surrogate is a Syne Tune ``Blackbox`` (every epoch's validation accuracy and cumulative
training time of a config), run by ``UserBlackboxBackend`` under the ``SimulatorCallback``:
time is simulated, each epoch lasting the surrogate's predicted time for it, so with 4 workers
trials end in the order those times say. The epoch budget is counted by
:class:`peer_common.Ledger` as the tuner sees results (in simulated-time order); a stop
criterion ends the study when it is spent.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import peer_common as pc  # noqa: E402
from lcbench_surrogate import Surrogate, search_space  # noqa: E402

SURROGATE = Surrogate()
HP_NAMES = [d.name for d in SURROGATE.dimensions]
EPOCH = "epoch"
ELAPSED = "elapsed_time"
METRIC = "val_accuracy"


def config_space() -> dict[str, Any]:
    """The study's search space (``lcbench_surrogate.search_space``) in Syne Tune's terms (its
    integer bounds are inclusive, as the study's)."""
    from syne_tune.config_space import lograndint, loguniform, randint, uniform

    out: dict[str, Any] = {}
    for name, kind, low, high, log in pc.space_bounds(search_space(SURROGATE.dimensions)):
        if kind == "int":
            out[name] = (lograndint if log else randint)(int(low), int(high))
        else:
            out[name] = (loguniform if log else uniform)(float(low), float(high))
    return out


def make_blackbox(task: str) -> Any:
    from syne_tune.blackbox_repository.blackbox import Blackbox

    class LCBench(Blackbox):
        def __init__(self) -> None:
            super().__init__(
                configuration_space=config_space(),
                fidelity_space={EPOCH: None},
                objectives_names=[METRIC, ELAPSED],
            )

        @property
        def fidelity_values(self) -> np.ndarray:
            return np.arange(1, pc.MAX_EPOCHS + 1)

        def _objective_function(
            self, configuration: dict[str, Any], fidelity: Any = None, seed: Any = None
        ) -> Any:
            curve = SURROGATE.curve(task, {k: configuration[k] for k in HP_NAMES})
            elapsed = np.cumsum(pc.epoch_seconds(list(curve["time"])))
            table = np.stack([curve[METRIC].astype(float), elapsed], axis=1)
            if fidelity is None:
                return table
            row = table[int(fidelity[EPOCH]) - 1]
            return {METRIC: row[0], ELAPSED: row[1]}

    return LCBench()


def make_scheduler(peer: str, seed: int) -> Any:
    from syne_tune.optimizer.baselines import ASHA, BOHB, MOBSTER

    kinds = {"syne-asha": ASHA, "syne-bohb": BOHB, "syne-mobster": MOBSTER}
    if peer not in kinds:
        raise ValueError(f"unknown Syne Tune cell {peer!r} (allowed: {pc.SYNE_CELLS})")
    return kinds[peer](
        config_space(),
        metric=METRIC,
        mode="max",
        resource_attr=EPOCH,
        max_t=pc.MAX_EPOCHS,
        random_seed=seed,
    )


def run_study(cell: str, task: str, seed: int, workers: int) -> dict[str, Any]:
    from syne_tune import Tuner
    from syne_tune.backend.simulator_backend.simulator_callback import SimulatorCallback
    from syne_tune.blackbox_repository.simulated_tabular_backend import UserBlackboxBackend
    from syne_tune.tuner_callback import TunerCallback

    ledger = pc.Ledger()

    class Count(TunerCallback):
        def on_trial_result(self, trial: Any, status: str, result: Any, decision: str) -> None:
            tid = str(trial.trial_id)
            counted = ledger.result(
                tid, int(result[EPOCH]), float(result[METRIC]), dict(trial.config)
            )
            if counted and decision == "STOP":
                ledger.stopped(tid)

        def on_trial_complete(self, trial: Any, result: Any) -> None:
            ledger.stopped(str(trial.trial_id))

    folder = tempfile.mkdtemp(prefix="dvt-peer-syne-")
    os.environ["SYNETUNE_FOLDER"] = folder
    start = time.perf_counter()
    try:
        backend = UserBlackboxBackend(blackbox=make_blackbox(task), elapsed_time_attr=ELAPSED)
        tuner = Tuner(
            trial_backend=backend,
            scheduler=make_scheduler(cell.split("@")[0], seed),
            stop_criterion=lambda status: ledger.exhausted,
            n_workers=workers,
            sleep_time=0,
            results_update_interval=1e9,
            print_update_interval=1e9,
            callbacks=[SimulatorCallback(), Count()],
            save_tuner=False,
            tuner_name=f"{cell.replace('@', '-')}-{task}-{seed}",
        )
        tuner.run()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    wall = time.perf_counter() - start
    if not ledger.exhausted:
        raise RuntimeError(f"{cell} task {task} seed {seed}: Syne Tune stopped before the budget")

    def seconds(config: dict[str, Any], epochs: int) -> float:
        hp = {k: config[k] for k in HP_NAMES}
        return float(SURROGATE.curve(task, hp, epochs)["time"][-1])

    return pc.study_result(cell, task, seed, ledger, wall, ledger.trials(seconds))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", default=",".join(pc.SYNE_CELLS))
    p.add_argument("--workers", type=int, default=1, choices=pc.CONCURRENCY)
    p.add_argument("--tasks", default=",".join(pc.PEER_TASKS))
    p.add_argument("--seeds", type=int, default=len(pc.PEER_SEEDS), help="seeds 0..N-1")
    p.add_argument("--results", type=Path, default=pc.RUNS)
    args = p.parse_args(argv)
    import syne_tune

    logging.getLogger("syne_tune").setLevel(logging.WARNING)
    cells = [pc.cell_name(c, args.workers) for c in args.cells.split(",")]
    todo = pc.todo(cells, args.tasks.split(","), list(range(args.seeds)), args.results)
    print(f"Syne Tune {syne_tune.__version__}: {len(todo)} studies, {args.workers} at a time")
    for cell, task, seed in todo:
        result = run_study(cell, task, seed, args.workers)
        pc.save(args.results, result)
        print(
            f"  {cell} task {task} seed {seed}: {len(result['trials'])} trials, "
            f"{result['wall_s']:.0f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
