"""Learning curves that depend on the trial's params, for sampler tests (torch-free).

``config["lr"]`` (log scale), ``config["drop"]`` and ``config["width"]`` set where a curve
levels off: best at lr = 3e-3, drop = 0.2, width 64. It reports ``score`` at steps 0 ..
``config["epochs"] - 1``, rising as ``1 - exp(-(step + 1) / 3)`` towards that level.
"""

from __future__ import annotations

import math
from typing import Any


def run(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    lr, drop, width = float(config["lr"]), float(config["drop"]), int(config["width"])
    level = (
        0.95
        - 0.08 * (math.log10(lr) + 2.5) ** 2
        - 0.5 * (drop - 0.2) ** 2
        - {16: 0.06, 32: 0.03, 64: 0.0}[width]
    )
    score = 0.0
    for step in range(int(config["epochs"])):
        score = level * (1 - math.exp(-(step + 1) / 3))
        ctx.report(step, {"score": score})
    return {"score": score}
