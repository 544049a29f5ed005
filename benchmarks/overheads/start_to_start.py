"""Per-trial orchestration cost over a long study: start-to-start interval, early vs late.

A study of N trials (default 400) on the torch-free toy entry point (one report, nothing else),
parallel 1, SQLite in a fresh folder. Prints the median start-to-start interval of the first 50
and the last 50 trials (from the trials' ``datetime_start`` in the study database), and the
median interval from a trial's end to the next trial's start (the orchestrator's own work): a
flat cost per trial keeps them equal; a launch that loads every trial grows with the study.

    python benchmarks/overheads/start_to_start.py [N]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
WINDOW = 50


def main(n_trials: int = 400) -> None:
    sys.path.insert(0, str(REPO))
    import os

    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    from dvt_hpo import run_study

    with tempfile.TemporaryDirectory() as tmp:
        study_file = Path(tmp) / "study.yaml"
        study_file.write_text(
            yaml.safe_dump(
                {
                    "study": {
                        "name": "start-to-start",
                        "n_trials": n_trials,
                        "sampler": {"kind": "random", "seed": 0},
                        "pruner": {"kind": "none"},
                    },
                    "objective": {"metric": "score", "direction": "maximize"},
                    "trainer": {
                        "entrypoint": "tests.entrypoints.toy:run",
                        "config": {"curve": [0.5]},
                    },
                    "search_space": [
                        {
                            "name": "x",
                            "path": "x",
                            "new_key": True,
                            "kind": "float",
                            "low": 0.0,
                            "high": 1.0,
                        }
                    ],
                }
            )
        )
        study = run_study(study_file, out=lambda line: None)
        trials = sorted(study.trials, key=lambda t: t.datetime_start)
    starts = [t.datetime_start.timestamp() for t in trials]
    ends = [t.datetime_complete.timestamp() for t in trials]
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    # From one trial's tell to the next trial's ask: the orchestrator's own work (recording,
    # counting the budget, asking), without the trial process's start-up and run.
    between = [b - a for a, b in zip(ends, starts[1:], strict=False)]
    print(f"trials: {len(trials)}")
    for label, values in (("start-to-start", gaps), ("tell-to-next-ask", between)):
        first = statistics.median(values[:WINDOW])
        last = statistics.median(values[-WINDOW:])
        print(
            f"{label}: median of the first {WINDOW} {first * 1000:.1f} ms, "
            f"of the last {WINDOW} {last * 1000:.1f} ms, last/first {last / first:.3f}"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 400)
