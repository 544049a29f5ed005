"""A trade-off toy for studies with several objectives and constraints (torch-free).

Its one knob ``x`` (in ``config["x"]``) buys ``score`` with ``cost`` and ``size``: at epoch
``e`` of ``E`` it reports ``score = x * (e + 1) / E`` (best at the last epoch),
``cost = 10 * x + e`` (lowest at the first) and ``size = 1000 * x``, so every trial is on the
score/cost front and a ``size`` budget cuts it. ``config["omit"]``: metrics it never reports;
``config["size_once"]``: report ``size`` at epoch 0 only.
"""

from __future__ import annotations

from typing import Any


def run(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    x = float(config["x"])
    epochs = int(config.get("epochs", 3))
    omit = set(config.get("omit", ()))
    metrics: dict[str, float] = {}
    for step in range(epochs):
        metrics = {"score": x * (step + 1) / epochs, "cost": 10 * x + step, "size": 1000 * x}
        if config.get("size_once") and step > 0:
            del metrics["size"]
        metrics = {k: v for k, v in metrics.items() if k not in omit}
        ctx.report(step, metrics)
    return metrics
