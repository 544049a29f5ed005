"""Record the built-in trainer's learning curves on digits (the ``builtin_digits`` family).

    nice -n 19 python benchmarks/search/record_digits.py --minutes 60
    nice -n 19 python benchmarks/search/record_digits.py --holdout --configs 1000

Trains random configs of :data:`builtin_digits.SPACE` (drawn by dvt-hpo's own sampling of the
space, ``when:`` included, from a seed per task and config number) with ``dvt_hpo.train`` in this
process on one thread, config 0 of every task, then config 1, and so on, and appends each curve
(macro-F1 after each of the 10 epochs) to ``data/builtin_digits/curves.jsonl.gz``; with
``--holdout``, the held-out tasks (``builtin_digits.HOLDOUT_TASKS``) to ``holdout.jsonl.gz``. It
resumes where the table stops, so a rerun extends it: the same configs in the same order. Each
line records its training's seconds (``train_s``). Timing on one loaded core: an MLP training
0.3-1 s, a CNN one 1-7 s.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent.parent))

from builtin_digits import (  # noqa: E402
    HOLDOUT_TABLE,
    HOLDOUT_TASKS,
    SPACE,
    TABLE,
    TASKS,
    read_table,
    trainer_config,
)


def draw(task: str, index: int) -> dict[str, Any]:
    """Config ``index`` of ``task``: Optuna's random sampler, seeded per (task, index), through
    dvt-hpo's sampling of the space."""
    import optuna

    from dvt_hpo.sampling import space
    from dvt_hpo.spec.model import Condition, Dimension

    dims = [
        Dimension(
            name=d["name"],
            path=d["path"],
            kind=d["kind"],
            low=d.get("low"),
            high=d.get("high"),
            log=bool(d.get("log", False)),
            choices=tuple(d["choices"]) if "choices" in d else None,
            when=Condition({k: (v,) for k, v in d["when"].items()}) if "when" in d else None,
        )
        for d in SPACE
    ]
    seed = (zlib.crc32(task.encode()) + 7919 * index) % 2**31
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    return space.sample(study.ask(), dims)


def train(task: str, params: dict[str, Any]) -> list[float]:
    from dvt_hpo.train.builtin import run
    from dvt_hpo.trial.context import LocalContext

    with tempfile.TemporaryDirectory() as out:
        ctx = LocalContext(out=io.StringIO())
        run(trainer_config(task, params, out), ctx)
    return [float(m["macro_f1"]) for _, m in ctx.history]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=60.0, help="stop starting configs after this")
    p.add_argument("--configs", type=int, default=5000, help="configs per task at most")
    p.add_argument("--holdout", action="store_true", help="the held-out tasks, their own table")
    p.add_argument("--table", type=Path, help="the table instead (default: the tasks' own)")
    args = p.parse_args(argv)
    tasks = HOLDOUT_TASKS if args.holdout else TASKS
    args.table = args.table or (HOLDOUT_TABLE if args.holdout else TABLE)
    import optuna
    import torch

    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    done = {t: len(rows) for t, rows in read_table(args.table, tasks).items()}
    args.table.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    index = min(done.values())
    while index < args.configs and time.monotonic() - start < args.minutes * 60:
        for task in tasks:
            if done[task] > index:
                continue
            params = draw(task, index)
            t0 = time.perf_counter()
            curve = train(task, params)
            row = {"task": task, "index": index, "params": params, "curve": curve}
            row["train_s"] = round(time.perf_counter() - t0, 3)
            # One gzip member per line: a stop mid-write loses that line only.
            with gzip.open(args.table, "at") as fh:
                fh.write(json.dumps(row) + "\n")
            done[task] = index + 1
        index += 1
        if index % 20 == 0:
            print(f"{index} configs per task, {time.monotonic() - start:.0f} s", flush=True)
    print(f"{min(done.values())} configs per task in {args.table}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
