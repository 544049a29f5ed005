"""What ``trials.resume`` saves on a preemptible partition: epochs trained with and without it.

    python benchmarks/reliability/resume_savings.py                      # 9 trials of 8 epochs, rate 1/3
    python benchmarks/reliability/resume_savings.py --trials 12 --epochs 10 --seed 1 --rate 0.33

A study of ``--trials`` trials of the built-in trainer (digits, a small CNN, ``--epochs``
epochs, CPU) runs twice on a fresh SQLite study each time, with ``trials.resume`` off and on
(``resume_every_s: 0``: a save after every epoch). The same plan of preemptions is injected into
both: attempt k (in the order attempts start) is preempted with probability ``--rate`` after
training a random number of epochs (1 to epochs - 1), drawn with ``--seed``. A preemption is a
real one: the attempt holds as its next epoch begins (after that epoch's report and, with
resume, its save: the epoch a preemption lands in is lost in both modes and not counted), the
driver sends SIGTERM to the worker, as Slurm does, and starts a new worker, whose first trial
is the retry copy.

Prints one row per mode: the epochs every attempt trained (counted by the trainer, interrupted
attempts included), the preemptions, the time spent saving resume states (the trials' own
``resume_save_s``) and the bytes of the last state, and the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ENV_PLAN = "DVT_BENCH_PLAN"  # JSON list: epochs attempt k trains before its preemption, or null
ENV_DIR = "DVT_BENCH_DIR"  # where the attempts count themselves and log their epochs


def train(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    """The entry point: the built-in trainer, counting epochs and preempted by the plan."""
    from dvt_hpo.train import run

    folder = Path(os.environ[ENV_DIR])
    with open(folder / "attempts.log", "a", encoding="utf-8") as f:
        f.write(f"{ctx.trial_number}\n")
    attempt = len((folder / "attempts.log").read_text().split()) - 1
    plan = json.loads(os.environ[ENV_PLAN])
    quota = plan[attempt] if attempt < len(plan) else None
    return run(config, _Preempted(ctx, folder, quota))


class _Preempted:
    def __init__(self, ctx: Any, folder: Path, quota: int | None) -> None:
        self._ctx, self._folder, self._quota, self._trained = ctx, folder, quota, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def report(self, step: int, metrics: dict[str, float]) -> None:
        self._ctx.report(step, metrics)
        self._trained += 1
        with open(self._folder / "epochs.log", "a", encoding="utf-8") as f:
            f.write(f"{self._ctx.trial_number} {step}\n")
        if self._ctx.resume_dir is None:
            self._preempt_if_due()  # nothing is saved: the preemption lands in the next epoch

    def save_state(self, obj: Any, **kwargs: Any) -> bool:
        saved = self._ctx.save_state(obj, **kwargs)
        self._preempt_if_due()  # the preemption lands in the next epoch, after the save
        return saved

    def _preempt_if_due(self) -> None:
        if self._quota is not None and self._trained == self._quota:
            (self._folder / "preempt").write_text(str(self._ctx.trial_number))
            while True:  # until the worker's SIGTERM reaches this trial (TrialStopped)
                time.sleep(0.05)


def study_file(folder: Path, args: argparse.Namespace, resume: bool) -> Path:
    doc = {
        "study": {
            "name": f"resume-savings-{'on' if resume else 'off'}",
            "storage": f"sqlite:///{folder / 'study.db'}",
            "n_trials": args.trials,
            "sampler": {"kind": "random", "seed": args.seed},
            "pruner": {"kind": "none"},
            "heartbeat_interval_s": 1,
            "grace_period_s": 3,
        },
        "objective": {"metric": "accuracy", "direction": "maximize", "reduce": "last"},
        "trials": {
            "devices": "cpu",
            "timeout_s": 600,
            "stop_grace_s": 5,
            "max_retries": 50,  # never used up: both modes finish every trial
            "resume": resume,
            "resume_every_s": 0,
            "warm": False,
        },
        "trainer": {
            "entrypoint": "resume_savings:train",
            "config": {
                "epochs": args.epochs,
                "seed": 0,
                "devices": {"device": "cpu", "threads": 1},
                "model": {"builder": "cnn", "kwargs": {"width": 16, "depth": 2}},
                "data": {"kind": "digits", "batch_size": 64, "val_fraction": 0.2},
                "optim": {"target": "torch.optim.AdamW", "optim_args": {"lr": 0.003}},
            },
        },
        "search_space": [
            {
                "name": "lr",
                "path": "optim.optim_args.lr",
                "kind": "float",
                "low": 1e-3,
                "high": 1e-2,
                "log": True,
            }
        ],
    }
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run_mode(args: argparse.Namespace, plan: list[int | None], resume: bool) -> dict[str, Any]:
    import optuna

    with tempfile.TemporaryDirectory(prefix="resume-savings-") as tmp:
        folder = Path(tmp)
        path = study_file(folder, args, resume)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(
                None, [str(ROOT / "benchmarks" / "reliability"), str(ROOT), env.get("PYTHONPATH")]
            )
        )
        env[ENV_PLAN], env[ENV_DIR] = json.dumps(plan), str(folder)
        began, preemptions = time.monotonic(), 0
        while True:
            worker = subprocess.Popen(
                [sys.executable, "-m", "dvt_hpo", "run", str(path)],
                cwd=folder,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            marker = folder / "preempt"
            while worker.poll() is None and not marker.exists():
                time.sleep(0.05)
            if worker.poll() is not None:
                break
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=120)
            marker.unlink()
            preemptions += 1
        wall_s = time.monotonic() - began
        study = optuna.load_study(
            study_name=f"resume-savings-{'on' if resume else 'off'}",
            storage=f"sqlite:///{folder / 'study.db'}",
        )
        trials = study.trials
        complete = [t for t in trials if t.state.name == "COMPLETE"]
        epochs = len((folder / "epochs.log").read_text().split("\n")) - 1
        save_s = sum(float(t.user_attrs.get("resume_save_s", 0.0)) for t in trials)
        saves = sum(int(t.user_attrs.get("resume_saves", 0)) for t in trials)
        return {
            "mode": "resume" if resume else "no resume",
            "complete": len(complete),
            "attempts": len(trials),
            "preemptions": preemptions,
            "epochs": epochs,
            "saves": saves,
            "save_s": save_s,
            "wall_s": wall_s,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=9)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--rate", type=float, default=1 / 3, help="preemptions per attempt")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    # One draw per possible attempt (far more than can start): the same plan for both modes.
    plan = [
        rng.randint(1, args.epochs - 1) if rng.random() < args.rate else None
        for _ in range(args.trials * 4)
    ]
    rows = [run_mode(args, plan, resume=False), run_mode(args, plan, resume=True)]
    needed = args.trials * args.epochs
    print(
        f"{args.trials} trials x {args.epochs} epochs ({needed} epochs without interruption), "
        f"preemption rate {args.rate:.2f} per attempt, seed {args.seed}"
    )
    print(
        f"{'mode':<10} {'complete':>8} {'attempts':>8} {'preempted':>9} {'epochs':>7} "
        f"{'extra':>6} {'saves':>6} {'saving s':>9} {'wall s':>7}"
    )
    for r in rows:
        print(
            f"{r['mode']:<10} {r['complete']:>8} {r['attempts']:>8} {r['preemptions']:>9} "
            f"{r['epochs']:>7} {r['epochs'] - needed:>+6} {r['saves']:>6} {r['save_s']:>9.3f} "
            f"{r['wall_s']:>7.1f}"
        )
    off, on = rows
    lost_off, lost_on = off["epochs"] - needed, on["epochs"] - needed
    print(
        f"resume trained {off['epochs'] - on['epochs']} fewer epochs "
        f"({lost_off} redone without it, {lost_on} with it)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
