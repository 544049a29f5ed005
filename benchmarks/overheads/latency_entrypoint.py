"""The trial side of ``benchmarks/overheads/pruning_latency.py``: reports a curve and times each report.

``run(config, ctx)`` reports ``{"score": x * (step + 1) / steps}`` for ``config["steps"]``
steps (``x`` is the trial's sampled param), sleeping ``config["step_s"]`` before each report
as a stand-in for an epoch of training; ``config["quantum"]`` rounds each value to a multiple of
it (as an accuracy on a validation set is). It times every ``ctx.report`` call, from the call to
the receipt of the orchestrator's decision (the pruning one included: it ends in
``TrialPruned``), and writes them to ``<trial_dir>/latency.json``. Stdlib only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def run(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    steps = int(config.get("steps", 30))
    step_s = float(config.get("step_s", 0.0))
    quantum = float(config.get("quantum", 0.0))
    x = float(ctx.params.get("x", 0.5))
    round_trips_s: list[float] = []
    pruned = False
    value = 0.0
    try:
        for step in range(steps):
            if step_s > 0:
                time.sleep(step_s)  # the "epoch": pacing, not a wait for an event
            value = x * (step + 1) / steps
            if quantum > 0:
                value = round(value / quantum) * quantum
            started = time.perf_counter()
            try:
                ctx.report(step, {"score": value})
            except BaseException:
                pruned = ctx.pruned_step is not None
                raise
            finally:
                round_trips_s.append(time.perf_counter() - started)
    finally:
        out = Path(ctx.trial_dir or ".") / "latency.json"
        tmp = out.with_name(f".{out.name}.tmp")
        tmp.write_text(
            json.dumps({"round_trip_s": round_trips_s, "pruned": pruned, "pid": os.getpid()})
        )
        os.replace(tmp, out)
    return {"score": value}
