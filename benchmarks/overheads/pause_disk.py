"""The disk ``trials.pause`` takes: peak disk of the kept states against the number of paused
trials, for a few disk limits, next to the same study stopping-only (``trials.resume``, whose
states live only while their trial runs) in the same run.

Each study: the built-in trainer on digits (a small CNN, CPU, one thread, seeded), ``epochs``
epochs, a random sampler (seed 0) over the learning rate, the median pruner, one trial at a
time, through ``dvt-hpo run``. While it runs, the resume folder is sampled every
``--every-s`` (a poll: the study has no event for "a state was written" that this process
could await); a paused state is a chain folder whose state is not empty while none of its
attempts runs.

    python benchmarks/overheads/pause_disk.py [--trials 24] [--epochs 6] [--limits none,8,4,2]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from dvt_hpo.recovery.retries import is_paused, retry_history  # noqa: E402


def study_doc(name: str, *, trials: int, epochs: int, pause: bool, limit: int | None) -> Any:
    trials_section: dict[str, Any] = {"devices": "cpu", "parallel": 1, "warm": False}
    if pause:
        trials_section.update(pause=True, resume_every_s=1000)
        if limit is not None:
            trials_section["paused_max"] = limit
    else:
        trials_section.update(resume=True, resume_every_s=0)
    return {
        "study": {
            "name": name,
            "storage": "sqlite:///study.db",
            "n_trials": trials,
            "sampler": {"kind": "random", "seed": 0},
            "pruner": {"kind": "median", "n_startup_trials": 3},
        },
        "objective": {"metric": "macro_f1", "direction": "maximize", "reduce": "last"},
        "trials": trials_section,
        "trainer": {
            "entrypoint": "dvt_hpo.train:run",
            "config": {
                "epochs": epochs,
                "seed": 0,
                "deterministic": True,
                "devices": {"device": "cpu", "threads": 1},
                "model": {"builder": "cnn", "kwargs": {"width": 16, "depth": 2, "dropout": 0.0}},
                "data": {"kind": "digits", "batch_size": 32, "val_fraction": 0.2},
                "optim": {"target": "torch.optim.AdamW", "optim_args": {"lr": 0.01}},
            },
        },
        "search_space": [
            {
                "name": "lr",
                "path": "optim.optim_args.lr",
                "kind": "float",
                "low": 1e-5,
                "high": 0.05,
                "log": True,
            }
        ],
    }


def _bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            # Deleted while walked: the study evicted it.
            with contextlib.suppress(FileNotFoundError):
                total += (Path(root) / name).stat().st_size
    return total


@dataclass
class Peak:
    states: int = 0
    bytes: int = 0

    def sample(self, resume_dir: Path) -> None:
        if not resume_dir.is_dir():
            return
        folders = [f / "state" for f in resume_dir.iterdir()]
        kept = [f for f in folders if f.is_dir() and any(f.iterdir())]
        self.states = max(self.states, len(kept))
        self.bytes = max(self.bytes, sum(_bytes(f) for f in kept))


@dataclass
class Row:
    label: str
    paused: int
    continued: int
    peak_states: int
    peak_mb: float
    end_mb: float
    wall_s: float
    save_s: float
    best: float | None


def run_one(label: str, doc: Any, every_s: float) -> Row:
    with tempfile.TemporaryDirectory(prefix="pause-disk-") as tmp:
        folder = Path(tmp)
        (folder / "study.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        resume_dir = folder / "runs" / doc["study"]["name"] / "resume"
        peak, done = Peak(), threading.Event()

        def watch() -> None:
            while not done.wait(every_s):
                peak.sample(resume_dir)

        watcher = threading.Thread(target=watch, daemon=True)
        start = time.monotonic()
        watcher.start()
        proc = subprocess.run(
            [sys.executable, "-m", "dvt_hpo", "run", "study.yaml"],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        wall_s = time.monotonic() - start
        done.set()
        watcher.join()
        if proc.returncode != 0:
            raise SystemExit(f"{label}: dvt-hpo run exited {proc.returncode}\n{proc.stdout}")
        study = optuna.load_study(
            study_name=doc["study"]["name"], storage=f"sqlite:///{folder / 'study.db'}"
        )
        trials = study.get_trials(deepcopy=False)
        by_number = {t.number: t for t in trials}
        paused = sum(1 for t in trials if is_paused(t))
        continued = sum(
            1 for t in trials if retry_history(t) and is_paused(by_number[retry_history(t)[-1]])
        )
        best = study.best_value if any(t.state.name == "COMPLETE" for t in trials) else None
        end = _bytes(resume_dir) if resume_dir.is_dir() else 0
        # The trainer's own count of the seconds it spent writing states (part of the budget).
        save_s = sum(float(t.user_attrs.get("resume_save_s") or 0.0) for t in trials)
        mb = (peak.bytes / 1e6, end / 1e6)
        return Row(label, paused, continued, peak.states, *mb, wall_s, save_s, best)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument(
        "--limits", default="none,8,4,2", help="trials.paused_max values ('none': no limit)"
    )
    parser.add_argument("--every-s", type=float, default=0.1)
    args = parser.parse_args()
    rows = [
        run_one(
            "stopping only (trials.resume)",
            study_doc("stop", trials=args.trials, epochs=args.epochs, pause=False, limit=None),
            args.every_s,
        )
    ]
    for text in args.limits.split(","):
        limit = None if text == "none" else int(text)
        label = f"pause, paused_max {text}"
        doc = study_doc(
            f"pause-{text}", trials=args.trials, epochs=args.epochs, pause=True, limit=limit
        )
        rows.append(run_one(label, doc, args.every_s))
    print(
        f"{args.trials} trials of {args.epochs} epochs (digits, small CNN, CPU), median pruner, "
        f"one at a time; disk sampled every {args.every_s:g} s"
    )
    print(
        "| study | paused | continued | peak states on disk (paused, running) | peak disk (MB) "
        "| disk at the end (MB) | wall (s) | saving states (s) | best macro-F1 |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        best = "-" if r.best is None else f"{r.best:.4f}"
        print(
            f"| {r.label} | {r.paused} | {r.continued} | {r.peak_states} | {r.peak_mb:.2f} | "
            f"{r.end_mb:.2f} | {r.wall_s:.0f} | {r.save_s:.2f} | {best} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
