"""A chain of configurations for the several-objectives pruner (torch-free).

``config["x"]`` picks row ``x`` of ``config["points"]`` (``[score, cost]`` pairs). At step ``e``
of ``E`` it reports ``score * (e + 1) / E`` and ``cost * (e + 1)``: a row better on both in the
file is better on both at every step, so a file listed best first is a chain of dominance.
"""

from __future__ import annotations

from typing import Any


def run(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    score, cost = (float(v) for v in config["points"][int(config["x"])])
    epochs = int(config.get("epochs", 4))
    metrics: dict[str, float] = {}
    for step in range(epochs):
        metrics = {"score": score * (step + 1) / epochs, "cost": cost * (step + 1)}
        ctx.report(step, metrics)
    return metrics
