"""A plain argparse training script for the command-trainer tests, run as a process.

``--mode`` picks its behaviour: ``helper`` reports with :func:`dvt_hpo.report.report`,
``print`` prints lines for ``trainer.metrics_pattern``, ``crash`` raises ``ValueError`` after
its first epoch, ``silent`` never reports the objective, ``twice`` reports a step twice, ``signal`` kills itself with SIGKILL,
``stubborn`` reports but ignores the pruning ``SystemExit`` and SIGTERM, ``progress`` prints the
``print`` val line as a progress bar would: each redraw ends with ``\r``, no newline until
``done``. ``--out`` gets
``received-rank{R}.json``: the arguments it parsed, its pid and its torchrun variables.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

from dvt_hpo.report import report

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--width", type=int)
parser.add_argument("--flag")
parser.add_argument("--tags")
parser.add_argument("--config")
parser.add_argument("--out")
parser.add_argument("--mode", default="helper")
parser.add_argument("--sleep", type=float, default=0.0)
args = parser.parse_args()

if args.out:
    env = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "DVT_HPO_CONTROL")}
    received = {"args": vars(args), "pid": os.getpid(), "pgid": os.getpgrp(), "env": env}
    rank = os.environ.get("RANK", "0")
    Path(args.out, f"received-rank{rank}.json").write_text(json.dumps(received))

for epoch in range(args.epochs):
    score = args.lr * (epoch + 1)
    if args.mode == "helper":
        report(epoch, {"score": score}, loss=1 - score)
    elif args.mode == "print":
        print(f"epoch {epoch} train: loss={1 - score!r}")  # not matched: no score
        print(f"epoch {epoch} val: loss={1 - score!r} score={score!r}")
    elif args.mode == "progress":
        for batch in range(3):
            print(f"epoch {epoch} train {batch}/3 loss={1 - score!r}", end="\r", flush=True)
        print(f"epoch {epoch} val: loss={1 - score!r} score={score!r}", end="\r", flush=True)
    elif args.mode == "crash":
        report(epoch, score=score)
        raise ValueError(f"bad lr {args.lr}")
    elif args.mode == "silent":
        report(epoch, other=score)
    elif args.mode == "twice":
        report(epoch, score=score)
        report(epoch, loss=1 - score)
    elif args.mode == "signal":
        os.kill(os.getpid(), signal.SIGKILL)
    elif args.mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            report(epoch, score=score)
        except SystemExit:
            print("ignoring the prune", flush=True)
    time.sleep(args.sleep)
    print(f"finished epoch {epoch}", end="\r" if args.mode == "progress" else "\n", flush=True)
print("done", flush=True)
