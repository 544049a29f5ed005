"""The trial side of ``benchmarks/overheads/study_throughput.py`` and ``benchmarks/reliability/kill_soak.py``: a
trainer that does (almost) nothing.

``run(config, ctx)`` returns ``{"score": x}`` (``x`` is the trial's sampled param) at once, or
after ``config["sleep_s"]`` seconds when given (the soak's trials last long enough to be
killed mid-run), so what is timed is the orchestration: ask, payload, process start, result,
tell. Stdlib only.
"""

from __future__ import annotations

import time
from typing import Any


def run(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    if config.get("sleep_s"):
        time.sleep(float(config["sleep_s"]))
    return {"score": float(ctx.params.get("x", 0.0))}
