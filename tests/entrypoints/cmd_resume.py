"""A training script for the ``trials.resume`` command-trainer test, run as a process.

The rule of docs/resume.md: write the state into ``{resume_dir}`` (also
``$DVT_HPO_RESUME_DIR``), and read it when the folder is not empty. Each epoch
``value = value * 0.5 + x``, reported with :func:`dvt_hpo.report.report`, then
``state.json`` written atomically. ``$DVT_TEST_HOLD_AT``: trial 0 holds after saving that
epoch (writes ``$DVT_TEST_HOLD_FILE``, sleeps until stopped). Appends ``"<trial> <first
epoch>"`` to ``--log``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from dvt_hpo.atomic import write_json_atomic
from dvt_hpo.report import report

parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float, required=True)
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--resume-dir", required=True)
parser.add_argument("--trial", type=int, required=True)
parser.add_argument("--log", required=True)
args = parser.parse_args()

folder = Path(args.resume_dir)
assert os.environ.get("DVT_HPO_RESUME_DIR") == str(folder), "the variable names the same folder"
state = {"epoch": -1, "value": 0.0}
if (folder / "state.json").exists():
    state = json.loads((folder / "state.json").read_text())
first = state["epoch"] + 1
with open(args.log, "a", encoding="utf-8") as f:
    f.write(f"{args.trial} {first}\n")
value = state["value"]
for epoch in range(first, args.epochs):
    value = value * 0.5 + args.x
    report(epoch, {"score": value})
    write_json_atomic(folder / "state.json", {"epoch": epoch, "value": value})
    if args.trial == 0 and os.environ.get("DVT_TEST_HOLD_AT") == str(epoch):
        Path(os.environ["DVT_TEST_HOLD_FILE"]).write_text(f"0 {epoch}\n")
        while True:
            time.sleep(0.05)
# The final step: nothing more is reported or saved.
if args.trial == 0 and os.environ.get("DVT_TEST_HOLD_AT") == "final":
    Path(os.environ["DVT_TEST_HOLD_FILE"]).write_text("0 final\n")
    while True:
        time.sleep(0.05)
