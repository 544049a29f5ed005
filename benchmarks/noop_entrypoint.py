"""The trial side of ``benchmarks/study_throughput.py``: a trainer that does nothing.

``run(config, ctx)`` returns ``{"score": x}`` at once (``x`` is the trial's sampled param), so
what is timed is the orchestration: ask, payload, process start, result, tell. Stdlib only.
"""

from __future__ import annotations

from typing import Any


def run(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    return {"score": float(ctx.params.get("x", 0.0))}
