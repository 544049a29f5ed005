"""Ray Tune's ASHA on the LCBench surrogate, for the search-efficiency benchmark's peer rows.

    python3.11 -m venv .venv-ray && .venv-ray/bin/pip install 'ray[tune]' onnxruntime optuna
    PYTHONPATH=$PWD .venv-ray/bin/python benchmarks/search/peer_ray.py --workers 1   # or --workers 4
    PYTHONPATH=$PWD .venv-ray/bin/python benchmarks/search/peer_ray.py --check 2 --results /tmp/c
    PYTHONPATH=$PWD .venv-ray/bin/python benchmarks/search/peer_ray.py --engine ray --workers 4

Cells: ``ray-asha-random`` (``AsyncHyperBandScheduler`` with Ray's default search, the
``BasicVariantGenerator``'s random sampling) and ``ray-asha-optuna`` (the same scheduler with
``OptunaSearch``, Ray's wrapper of Optuna's TPE), both with Ray's documented defaults
(``grace_period=1``, ``reduction_factor=4``, ``brackets=1``) and ``max_t=52``, the metric
``val_accuracy`` maximized over ``training_iteration`` (one report per epoch).

By default (``--engine sim``) a study drives Ray Tune's own scheduler and searcher objects as
Ray's ``TuneController`` does, in simulated time (:func:`simulate_study`); ``--check N`` runs
the first N studies through ``Tuner.fit`` too and requires the same trials. ``--engine ray``
runs ``Tuner.fit`` for every study (one Ray session, real processes): with ``--workers 4`` each
epoch sleeps the surrogate's predicted time for it times ``--time-scale``, so trials end in the
order their predicted times say, blurred by Ray's latencies. Either way the epoch budget is
counted by :class:`peer_common.Ledger` as results arrive, and the study ends when it is spent.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import peer_common as pc  # noqa: E402

_SURROGATE: Any = None
_LEDGER: pc.Ledger | None = None  # the study running now (driver side)


def surrogate() -> Any:
    """One surrogate per process (the driver's, and each Ray worker's)."""
    global _SURROGATE
    if _SURROGATE is None:
        from lcbench_surrogate import Surrogate

        _SURROGATE = Surrogate()
    return _SURROGATE


def hp_names() -> list[str]:
    return [d.name for d in surrogate().dimensions]


def param_space() -> dict[str, Any]:
    """The study's search space (``lcbench_surrogate.search_space``) in Ray's terms; Ray's
    integer upper bounds are exclusive, the study's inclusive."""
    from lcbench_surrogate import search_space
    from ray import tune

    out: dict[str, Any] = {}
    for name, kind, low, high, log in pc.space_bounds(search_space(surrogate().dimensions)):
        if kind == "int":
            out[name] = (tune.lograndint if log else tune.randint)(int(low), int(high) + 1)
        else:
            out[name] = (tune.loguniform if log else tune.uniform)(float(low), float(high))
    return out


def make_trainable(task: str, scale: float) -> Any:
    def lcbench(config: dict[str, Any]) -> None:
        from ray import tune

        hp = {k: config[k] for k in hp_names()}
        curve = surrogate().curve(task, hp, pc.MAX_EPOCHS)
        pauses = pc.epoch_seconds(list(curve["time"]))
        for epoch in range(1, pc.MAX_EPOCHS + 1):
            if scale > 0:
                time.sleep(pauses[epoch - 1] * scale)
            tune.report({"val_accuracy": float(curve["val_accuracy"][epoch - 1])})

    return lcbench


def _callbacks() -> tuple[Any, Any]:
    from ray import tune

    class Count(tune.Callback):
        def on_trial_result(self, iteration: int, trials: Any, trial: Any, result: Any, **_: Any):
            assert _LEDGER is not None
            _LEDGER.result(
                trial.trial_id,
                int(result["training_iteration"]),
                float(result["val_accuracy"]),
                {k: trial.config[k] for k in hp_names()},
            )

        def on_trial_complete(self, iteration: int, trials: Any, trial: Any, **_: Any):
            assert _LEDGER is not None
            _LEDGER.stopped(trial.trial_id)

        on_trial_error = on_trial_complete

    class Budget(tune.Stopper):
        def __call__(self, trial_id: str, result: Any) -> bool:
            return False

        def stop_all(self) -> bool:
            return _LEDGER is not None and _LEDGER.exhausted

    return Count(), Budget()


def _peer(cell: str) -> str:
    peer = cell.split("@")[0]
    if peer not in pc.RAY_CELLS:
        raise ValueError(f"unknown Ray cell {cell!r} (allowed: {pc.RAY_CELLS})")
    return peer


def _scheduler() -> Any:
    from ray.tune.schedulers import AsyncHyperBandScheduler

    # Its defaults otherwise: grace_period=1, reduction_factor=4, brackets=1.
    return AsyncHyperBandScheduler(max_t=pc.MAX_EPOCHS)


def _result(task: str, seed: int, cell: str, ledger: pc.Ledger, wall: float) -> dict[str, Any]:
    if not ledger.exhausted:
        raise RuntimeError(f"{cell} task {task} seed {seed}: the study ended before the budget")

    def seconds(config: dict[str, Any], epochs: int) -> float:
        return float(surrogate().curve(task, config, epochs)["time"][-1])

    return pc.study_result(cell, task, seed, ledger, wall, ledger.trials(seconds))


class _Trial:
    """What Ray's scheduler reads of a trial: its id."""

    def __init__(self, trial_id: str) -> None:
        self.trial_id = trial_id


def simulate_study(cell: str, task: str, seed: int, workers: int) -> dict[str, Any]:
    """The study with Ray Tune's own scheduler and searcher objects, called as Ray's
    ``TuneController`` calls them (``tune_controller.py``: ``_process_trial_result``,
    ``stop_trial``), in simulated time (:func:`peer_common.simulate`): no Ray runtime, so no
    per-trial start-up cost, and with 4 workers the exact order of the predicted times.
    ``--check`` runs studies both ways and requires the same trials."""
    from ray.tune.search.basic_variant import _BackwardsCompatibleNumpyRng
    from ray.tune.search.optuna import OptunaSearch
    from ray.tune.search.variant_generator import generate_variants

    peer = _peer(cell)
    scheduler = _scheduler()
    scheduler.set_search_properties("val_accuracy", "max")
    space = param_space()
    searcher: Any = None
    rng = _BackwardsCompatibleNumpyRng(seed)
    if peer == "ray-asha-optuna":
        searcher = OptunaSearch(metric="val_accuracy", mode="max", seed=seed)
        searcher.set_search_properties("val_accuracy", "max", space)
    ledger = pc.Ledger()
    trials: dict[str, _Trial] = {}
    count = itertools.count()

    def start() -> pc.NewTrial:
        tid = f"t{next(count):05d}"
        if searcher is not None:
            config = searcher.suggest(tid)
        else:  # BasicVariantGenerator's sampling: one variant of the space per trial
            _, spec = next(generate_variants({"config": space}, random_state=rng))
            config = spec["config"]
        trials[tid] = _Trial(tid)
        scheduler.on_trial_add(None, trials[tid])
        curve = surrogate().curve(task, {k: config[k] for k in hp_names()}, pc.MAX_EPOCHS)
        return pc.NewTrial(
            tid,
            {k: config[k] for k in hp_names()},
            [float(v) for v in curve["val_accuracy"]],
            pc.epoch_seconds(list(curve["time"])),
        )

    def result(tid: str, epoch: int, value: float) -> bool:
        report = {"val_accuracy": value, "training_iteration": epoch, "trial_id": tid}
        decision = scheduler.on_trial_result(None, trials[tid], report)
        if decision != "STOP":
            if searcher is not None:
                searcher.on_trial_result(tid, report)
            return False
        scheduler.on_trial_complete(None, trials[tid], report)
        if searcher is not None:
            searcher.on_trial_complete(tid, result=report)
        return True

    started = time.perf_counter()
    pc.simulate(workers, start, result, ledger)
    return _result(task, seed, cell, ledger, time.perf_counter() - started)


def run_study(cell: str, task: str, seed: int, workers: int, scale: float) -> dict[str, Any]:
    """The study through Ray Tune's ``Tuner.fit`` (real processes and time)."""
    global _LEDGER
    from ray import tune
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.basic_variant import BasicVariantGenerator
    from ray.tune.search.optuna import OptunaSearch

    # The concurrency set on the search itself too: max_concurrent_trials alone let
    # BasicVariantGenerator start trials while one ran.
    if _peer(cell) == "ray-asha-random":
        search: Any = BasicVariantGenerator(random_state=seed, max_concurrent=workers)
    else:
        search = ConcurrencyLimiter(
            OptunaSearch(metric="val_accuracy", mode="max", seed=seed), max_concurrent=workers
        )
    scheduler = _scheduler()
    _LEDGER = pc.Ledger()
    count, budget = _callbacks()
    storage = tempfile.mkdtemp(prefix="dvt-peer-ray-")
    start = time.perf_counter()
    try:
        tuner = tune.Tuner(
            make_trainable(task, scale if workers > 1 else 0.0),
            param_space=param_space(),
            tune_config=tune.TuneConfig(
                metric="val_accuracy",
                mode="max",
                scheduler=scheduler,
                search_alg=search,
                num_samples=100_000,  # the epoch budget ends the study
                max_concurrent_trials=workers,
                reuse_actors=True,
            ),
            run_config=tune.RunConfig(
                name=f"{cell}-{task}-{seed}",
                storage_path=storage,
                stop=budget,
                callbacks=[count],
                verbose=0,
            ),
        )
        tuner.fit()
    finally:
        shutil.rmtree(storage, ignore_errors=True)
    return _result(task, seed, cell, _LEDGER, time.perf_counter() - start)


def same_search(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two runs of one study tried the same trials with the same outcomes (the value
    to float32 precision: Ray's results pass through its JSON-like result handling)."""

    def key(r: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [
            (
                t["number"],
                t["state"],
                t["epochs"],
                None if t["value"] is None else round(t["value"], 4),
            )
            for t in r["trials"]
        ]

    return key(a) == key(b)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", default=",".join(pc.RAY_CELLS))
    p.add_argument("--workers", type=int, default=1, choices=pc.CONCURRENCY)
    p.add_argument("--tasks", default=",".join(pc.PEER_TASKS))
    p.add_argument("--seeds", type=int, default=len(pc.PEER_SEEDS), help="seeds 0..N-1")
    p.add_argument(
        "--engine",
        choices=("sim", "ray"),
        default="sim",
        help="sim: Ray's scheduler and searcher in simulated time; ray: Tuner.fit, real time",
    )
    p.add_argument(
        "--check",
        type=int,
        default=0,
        help="first run N studies through Tuner.fit too (1 at a time): same trials",
    )
    p.add_argument(
        "--time-scale",
        type=float,
        default=0.01,
        help="ray engine, 4 at a time: sleep = epoch time x this",
    )
    p.add_argument("--results", type=Path, default=pc.RUNS)
    args = p.parse_args(argv)
    import ray

    cells = [pc.cell_name(c, args.workers) for c in args.cells.split(",")]
    todo = pc.todo(cells, args.tasks.split(","), list(range(args.seeds)), args.results)
    print(
        f"Ray {ray.__version__}: {len(todo)} studies, {args.workers} trial(s) at a time, engine {args.engine}"
    )
    if args.engine == "ray" or args.check:
        # The workers find this folder and the repository.
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(HERE), str(HERE.parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        ray.init(num_cpus=max(4, args.workers), include_dashboard=False, log_to_driver=False)
    for i, (cell, task, seed) in enumerate(todo):
        if args.engine == "ray":
            result = run_study(cell, task, seed, args.workers, args.time_scale)
            result["engine"] = "peer-ray"
        else:
            result = simulate_study(cell, task, seed, args.workers)
            result["engine"] = "peer-sim"
        if i < args.check and args.workers == 1 and args.engine == "sim":
            real = run_study(cell, task, seed, 1, 0.0)
            if not same_search(result, real):
                print(json.dumps({"sim": result["trials"][:20], "ray": real["trials"][:20]}))
                raise SystemExit(
                    f"{cell} task {task} seed {seed}: the simulation differs from Tuner.fit"
                )
            print(
                f"  {cell} task {task} seed {seed}: Tuner.fit tried the same {len(real['trials'])} trials ({real['wall_s']:.0f} s)"
            )
        pc.save(args.results, result)
        print(
            f"  {cell} task {task} seed {seed}: {len(result['trials'])} trials, "
            f"{result['wall_s']:.1f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    # Through the module, not __main__: Ray's workers then import the trainable by name
    # (with their own surrogate) instead of pickling the driver's.
    import peer_ray

    raise SystemExit(peer_ray.main())
