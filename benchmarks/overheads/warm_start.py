"""Warm against cold trial starts, in one run: start-to-start time per trial.

Three studies, each run cold (``trials.warm: false``: a fresh ``python -m dvt_hpo.trial`` per
trial) and warm (forked from the template that imported everything once), parallel 1, SQLite:

(a) a torch-free no-op trainer (one report);
(b) a no-op trainer whose module imports torch at the top;
(c) the quickstart study (digits CNN, 8 trials, ``parallel: 1`` for a like-for-like wall time),
    checking that warm and cold trials got the same params and the same values.

The floor is a bare ``python -c "import torch"``. Start-to-start is the median interval between
consecutive trials' ``datetime_start``; for the no-op trainers it is all overhead.

    python benchmarks/overheads/warm_start.py [--trials N] [--skip-quickstart]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]

TORCH_NOOP = """
import torch  # noqa: F401  (the point: a module that imports torch at the top)


def run(config, ctx):
    ctx.report(0, {"score": 0.5})
    return {"score": 0.5}
"""


def _study(name: str, entrypoint: str, n_trials: int, warm: bool) -> dict[str, Any]:
    return {
        "study": {
            "name": name,
            "n_trials": n_trials,
            "sampler": {"kind": "random", "seed": 0},
            "pruner": {"kind": "none"},
        },
        "objective": {"metric": "score", "direction": "maximize"},
        "trials": {"warm": warm, "parallel": 1},
        "trainer": {"entrypoint": entrypoint, "config": {"curve": [0.5]}},
        "search_space": [
            {"name": "x", "path": "x", "new_key": True, "kind": "float", "low": 0.0, "high": 1.0}
        ],
    }


def _run(study_file: Path, overrides: list[str] | None = None) -> tuple[Any, float]:
    from dvt_hpo import run_study

    t0 = time.perf_counter()
    study = run_study(study_file, overrides or [], out=lambda line: None)
    return study, time.perf_counter() - t0


def _start_to_start(study: Any) -> float:
    starts = sorted(t.datetime_start.timestamp() for t in study.trials)
    return statistics.median(b - a for a, b in zip(starts, starts[1:], strict=False))


def _process_start(study: Any) -> float:
    """Median launch-to-entry-call time (user attr ``startup_s``): the process start's cost,
    interpreter and imports included."""
    return statistics.median(t.user_attrs["startup_s"] for t in study.trials)


def _floor(repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20, help="trials per no-op study")
    parser.add_argument("--skip-quickstart", action="store_true")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    sys.path.insert(0, str(REPO))
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows: list[tuple[str, str, str, str]] = []
    floor = _floor()
    rows.append(("python -c 'import torch' (floor)", f"{floor:.3f}", "", ""))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "torch_noop.py").write_text(TORCH_NOOP)
        for label, entrypoint in (
            ("(a) torch-free no-op", "tests.entrypoints.toy:run"),
            ("(b) no-op importing torch", "torch_noop:run"),
        ):
            result = {}
            for warm in (False, True):
                name = f"{'warm' if warm else 'cold'}-{entrypoint.partition(':')[0]}"
                path = folder / f"{name}.yaml"
                path.write_text(yaml.safe_dump(_study(name, entrypoint, args.trials, warm)))
                study, _ = _run(path)
                result[warm] = (_start_to_start(study), _process_start(study))
            (cold, cold_start), (warm_s, warm_start) = result[False], result[True]
            rows.append(
                (
                    f"{label}: start-to-start",
                    f"{cold:.3f}",
                    f"{warm_s:.3f}",
                    f"{cold / warm_s:.1f}x",
                )
            )
            rows.append(
                (
                    f"{label}: launch to entry call",
                    f"{cold_start:.3f}",
                    f"{warm_start:.3f}",
                    f"{cold_start / warm_start:.1f}x",
                )
            )
        if not args.skip_quickstart:
            walls = {}
            trials = {}
            for warm in (False, True):
                run_dir = folder / ("qs-warm" if warm else "qs-cold")
                run_dir.mkdir()
                shutil.copy(REPO / "studies" / "quickstart.yaml", run_dir / "quickstart.yaml")
                study, wall = _run(
                    run_dir / "quickstart.yaml",
                    [f"trials.warm={str(warm).lower()}", "trials.parallel=1"],
                )
                walls[warm] = wall
                trials[warm] = [
                    (t.number, t.params, t.state.name, t.value)
                    for t in sorted(study.trials, key=lambda t: t.number)
                ]
            same = "same params and values" if trials[False] == trials[True] else "DIFFERENT"
            rows.append(
                (
                    "(c) quickstart, 8 trials, parallel 1: wall time",
                    f"{walls[False]:.1f}",
                    f"{walls[True]:.1f}",
                    f"-{(1 - walls[True] / walls[False]) * 100:.0f}% ({same})",
                )
            )
    header = ("case", "cold s", "warm s", "warm vs cold")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |"
    print(line)
    print("| " + " | ".join("-" * w for w in widths) + " |")
    for row in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    print(
        "start-to-start: median interval between consecutive trials' starts (s per trial); "
        "launch to entry call: from starting the trial process until the entry point is called (median)"
    )


if __name__ == "__main__":
    main()
