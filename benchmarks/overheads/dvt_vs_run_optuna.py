"""deepvisiontools' own ``run_optuna`` next to dvt-hpo on the same task and search space.

    .venv-dvt/bin/python benchmarks/overheads/dvt_vs_run_optuna.py [--trials 6] [--seeds 0 1 2]
                            [--epochs 4] [--workdir DIR] [--cold] [--parallel 1 2]

The task: the example study's smp U-Net (``studies/deepvisiontools/trainer.yaml``) on the
generated 64x64 segmentation set (16 train, 8 valid), batch size 4, CPU. The space: ``lr``
(log-uniform 1e-4..1e-2) and ``model_spec.kwargs.decoder_attention_type`` (none or scse: a
model kwarg, so the parameter count tells which architecture a trial trained). Both runners:
TPE (``seed``, 3 startup trials), median pruner (2 startup trials, 1 warm-up epoch), objective
``valid/f1/cls1`` (the foreground F1), maximized, best epoch.

- ``run_optuna``: one process (started once, its import paid once) running every trial
  in-process (``OptunaConfig(n_trials=N)``, in-memory storage, MLflow study registration off;
  it still logs every trial to MLflow, which its runner forces). Its score callback records the
  trained model's parameter count.
- ``dvt-hpo``: ``dvt-hpo run`` of the same study (SQLite, each trial a process of its own,
  ``logging.backends: []``), one trial at a time; with ``--parallel 1 2`` also a row with 2
  trials at a time (``trials.parallel: 2``, one CPU thread each; ``run_optuna`` has no
  equivalent: its trials share one process). Trials start warm (forked from a template that
  imported torch and deepvisiontools once); ``--cold`` starts each as a fresh interpreter that
  imports them (``trials.warm: false``).

The two runners alternate per seed, so both see the same load on a shared machine. Columns:
wall time of the whole study (process start to exit), best value, whether the best trial
trained the architecture its params name, trials pruned of N, failed trials, how many trials
trained the architecture they sampled (the parameter count equals the one of the U-Net smp
builds from the sampled kwargs), and how trials started: for dvt-hpo the mean ``startup_s``
(launch to the entry point's call) and ``ready_s`` (launch to the training's start: imports
done, the trial's folder entered) of the trials after the first ``parallel`` (those start
together), and the first trial's ``ready_s`` (it waits for the template's imports, or pays
its own).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

MONITOR = "valid/f1/cls1"
ATTENTION = [None, "scse"]
LR = (1e-4, 1e-2)


def trainer_config(dataset: Path, epochs: int) -> dict[str, Any]:
    config = yaml.safe_load((ROOT / "studies" / "deepvisiontools" / "trainer.yaml").read_text())
    config["epochs"] = epochs
    config["data"] = {
        **config["data"],
        "train": str(dataset / "train"),
        "valid": str(dataset / "valid"),
    }
    config["logging"] = {"backends": []}
    return config


def expected_params(attention: str | None) -> int:
    import segmentation_models_pytorch as smp

    kwargs = trainer_config(Path("."), 1)["model_spec"]["kwargs"]
    model = smp.Unet(
        encoder_name=kwargs["encoder_name"],
        encoder_weights=None,
        encoder_depth=kwargs["encoder_depth"],
        decoder_channels=kwargs["decoder_channels"],
        in_channels=kwargs["in_channels"],
        classes=kwargs["num_classes"],
        decoder_attention_type=attention,
    )
    return sum(p.numel() for p in model.parameters())


# -- run_optuna (child process) -------------------------------------------------------------


def score_with_params(
    history: list[Any], *, mode: str, cfg: Any, trial: Any, trainer: Any
) -> float:
    """run_optuna's score callback: the best epoch, and the trained model's parameter count."""
    from deepvisiontools.train.trainer import _unwrap

    trial.set_user_attr("n_params", sum(p.numel() for p in _unwrap(trainer.model).parameters()))
    values = [float(row["value"]) for row in history]
    return max(values) if mode == "max" else min(values)


def child_run_optuna(args: dict[str, Any]) -> None:
    from deepvisiontools.train.optuna_wrapper import (
        OptunaConfig,
        OptunaPrunerConfig,
        OptunaSamplerConfig,
        OptunaScoreConfig,
        SearchSpaceSpec,
        run_optuna,
    )

    from dvt_hpo.backends.deepvisiontools.schema import BackendConfig
    from dvt_hpo.backends.deepvisiontools.training import (
        apply_settings,
        build_datasets,
        build_loaders,
        load_config,
    )
    from dvt_hpo.config.schema import from_mapping, to_plain

    config = to_plain(from_mapping(BackendConfig, args["config"]))
    spec = from_mapping(BackendConfig, config)
    apply_settings(spec)
    train_set, valid_set = build_datasets(spec.data, spec.settings.task)
    loaders = build_loaders(
        spec.data, train_set, valid_set, spec.data.batch_size, spec.settings.seed
    )
    block = {k: v for k, v in config.items() if k not in ("data", "settings")}
    block["eval"]["metrics"] = {"kind": "semantic_mask"}
    cfg = load_config(block, *loaders)
    cfg.optuna = OptunaConfig(
        enabled=True,
        study_name="bench",
        storage=None,
        n_trials=args["trials"],
        register_study_in_mlflow=False,
        sampler=OptunaSamplerConfig(kind="tpe", seed=args["seed"], n_startup_trials=3),
        pruner=OptunaPrunerConfig(kind="median", n_startup_trials=2, n_warmup_steps=1),
        score=OptunaScoreConfig(
            monitor=MONITOR,
            mode="max",
            reducer="best",
            callback_target="benchmarks.dvt_vs_run_optuna:score_with_params",
        ),
        search_space=[
            SearchSpaceSpec(
                name="lr", kind="float", path="optim.optim_args.lr", low=LR[0], high=LR[1], log=True
            ),
            SearchSpaceSpec(
                name="attention",
                kind="categorical",
                path="model_spec.kwargs.decoder_attention_type",
                choices=ATTENTION,
            ),
        ],
    )
    study = run_optuna(cfg)
    trials = [
        {
            "state": t.state.name,
            "value": t.value,
            "params": t.params,
            "n_params": t.user_attrs.get("n_params"),
        }
        for t in study.trials
    ]
    print("RESULT " + json.dumps(trials))


# -- the two runs ----------------------------------------------------------------------------


def isolated_env(folder: Path) -> dict[str, str]:
    home = folder / "home"
    home.mkdir(parents=True, exist_ok=True)
    # An existing folder: ultralytics (8.4) falls back to /tmp/Ultralytics otherwise.
    return {**os.environ, "HOME": str(home), "YOLO_CONFIG_DIR": str(home)}


def run_run_optuna(
    folder: Path, config: dict[str, Any], seed: int, trials: int
) -> tuple[float, list[dict[str, Any]]]:
    folder.mkdir(parents=True)
    payload = json.dumps({"config": config, "seed": seed, "trials": trials})
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child-run-optuna", payload],
        cwd=folder,
        env=isolated_env(folder),
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - began
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"run_optuna failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return wall, json.loads(lines[-1][len("RESULT ") :])


def run_dvt_hpo(
    folder: Path,
    config: dict[str, Any],
    seed: int,
    trials: int,
    *,
    warm: bool = True,
    parallel: int = 1,
) -> tuple[float, list[dict[str, Any]]]:
    import optuna

    folder.mkdir(parents=True)
    (folder / "trainer.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    study = {
        "study": {
            "name": "bench",
            "storage": "sqlite:///bench.db",
            "n_trials": trials,
            "sampler": {"kind": "tpe", "seed": seed, "n_startup_trials": 3},
            "pruner": {"kind": "median", "n_startup_trials": 2, "n_warmup_steps": 1},
        },
        "objective": {"metric": MONITOR, "direction": "maximize", "reduce": "best"},
        "trials": {
            "launcher": "process",
            "parallel": parallel,
            "devices": "cpu",
            "timeout_s": 600,
            "warm": warm,
        },
        "trainer": {
            "entrypoint": "dvt_hpo.backends.deepvisiontools:run",
            "schema": "dvt_hpo.backends.deepvisiontools:BackendConfig",
            "config_file": "trainer.yaml",
        },
        "search_space": [
            {
                "name": "lr",
                "path": "optim.optim_args.lr",
                "kind": "float",
                "low": LR[0],
                "high": LR[1],
                "log": True,
            },
            {
                "name": "attention",
                "path": "model_spec.kwargs.decoder_attention_type",
                "kind": "categorical",
                "choices": ATTENTION,
            },
        ],
    }
    (folder / "study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "dvt_hpo", "run", str(folder / "study.yaml")],
        cwd=folder,
        env=isolated_env(folder),
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(
            f"dvt-hpo failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    loaded = optuna.load_study(study_name="bench", storage=f"sqlite:///{folder / 'bench.db'}")
    return wall, [
        {
            "state": t.state.name,
            "value": t.value,
            "params": t.params,
            "n_params": t.user_attrs.get("n_params"),
            "warm": bool(t.user_attrs.get("warm_start")),
            "startup_s": t.user_attrs.get("startup_s"),
            "ready_s": t.user_attrs.get("ready_s"),
        }
        for t in loaded.trials
    ]


def summarize(
    wall: float, trials: list[dict[str, Any]], expected: dict[Any, int], parallel: int = 1
) -> dict[str, Any]:
    def is_faithful(trial: dict[str, Any]) -> bool:
        return trial["n_params"] == expected[trial["params"]["attention"]]

    complete = [t for t in trials if t["state"] == "COMPLETE" and t["value"] is not None]
    best = max(complete, key=lambda t: t["value"]) if complete else None
    trained = [t for t in trials if t["n_params"] is not None]
    faithful = sum(is_faithful(t) for t in trained)
    return {
        "wall": wall,
        "best": best["value"] if best else float("nan"),
        # Whether the best value was reached by the architecture its params name.
        "best_faithful": "yes" if best and is_faithful(best) else "no",
        "pruned": sum(t["state"] == "PRUNED" for t in trials),
        "failed": sum(t["state"] == "FAIL" for t in trials),
        "n": len(trials),
        "faithful": f"{faithful}/{len(trained)}",
        "starts": starts(trials, parallel),
    }


def starts(trials: list[dict[str, Any]], parallel: int = 1) -> str:
    """How the trials started (run_optuna's run in its one process). The first ``parallel``
    trials start together and wait for the template's imports (or pay their own): the means
    are over the trials after them."""
    if not trials or "ready_s" not in trials[0]:
        return "in-process"
    kind = "warm" if all(t["warm"] for t in trials) else "cold"
    later = [
        t for t in trials[parallel:] if t["ready_s"] is not None and t["startup_s"] is not None
    ]

    def mean(key: str) -> float:
        return sum(t[key] for t in later) / len(later) if later else float("nan")

    first = trials[0]["ready_s"]
    return (
        f"{kind}: startup {mean('startup_s'):.2f} s, ready {mean('ready_s'):.2f} s "
        f"(first trial {first if first is not None else float('nan'):.1f} s)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--cold", action="store_true", help="dvt-hpo trials start cold")
    parser.add_argument(
        "--parallel",
        type=int,
        nargs="+",
        default=[1],
        help="dvt-hpo's trials.parallel, one dvt-hpo row per value (run_optuna runs one trial "
        "at a time in its process)",
    )
    parser.add_argument("--child-run-optuna", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_run_optuna is not None:
        child_run_optuna(json.loads(args.child_run_optuna))
        return 0

    from dvt_hpo.backends.deepvisiontools.demo_data import write_dataset

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="dvt-vs-run-optuna-"))
    dataset = write_dataset(workdir / "data", classes=1, seed=0)
    config = trainer_config(dataset, args.epochs)
    expected = {attention: expected_params(attention) for attention in ATTENTION}
    print(f"workdir {workdir}; {args.trials} trials x {args.epochs} epochs; params {expected}")
    print(f"load average at the start: {load()}")
    print(
        "| seed | runner | wall s | best valid/f1/cls1 | best trial trained its params "
        "| pruned / trials | failed | trained = sampled | trial starts |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    names = ["run_optuna", *(dvt_name(p) for p in args.parallel)]
    totals: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for seed in args.seeds:
        for name, parallel in zip(names, [0, *args.parallel], strict=True):
            folder = workdir / f"{name.replace(' ', '-').replace(',', '')}-{seed}"
            if name == "run_optuna":
                wall, trials = run_run_optuna(folder, config, seed, args.trials)
            else:
                wall, trials = run_dvt_hpo(
                    folder, config, seed, args.trials, warm=not args.cold, parallel=parallel
                )
            row = summarize(wall, trials, expected, max(parallel, 1))
            totals[name].append(row)
            print(
                f"| {seed} | {name} | {row['wall']:.1f} | {row['best']:.4f} | {row['best_faithful']} "
                f"| {row['pruned']} / {row['n']} "
                f"| {row['failed']} | {row['faithful']} | {row['starts']} |",
                flush=True,
            )
    print(f"load average at the end: {load()}")
    theirs = totals["run_optuna"]
    kind = "cold" if args.cold else "warm"
    for name in names[1:]:
        ours = totals[name]
        per_seed = ", ".join(
            f"seed {seed} {a['wall'] / b['wall']:.2f}x"
            for seed, a, b in zip(args.seeds, ours, theirs, strict=True)
        )
        ratio = sum(r["wall"] for r in ours) / sum(r["wall"] for r in theirs)
        print(
            f"{name} / run_optuna wall time over the seeds: {ratio:.2f}x ({kind} trial starts; "
            f"{per_seed})"
        )
    for name, rows in totals.items():
        mean = sum(r["best"] for r in rows) / len(rows)
        print(f"{name}: mean best {MONITOR} over the seeds {mean:.4f}")
    return 0


def dvt_name(parallel: int) -> str:
    return "dvt-hpo" if parallel == 1 else f"dvt-hpo, {parallel} at a time"


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


if __name__ == "__main__":
    raise SystemExit(main())
