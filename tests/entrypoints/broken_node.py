"""A trainer on a node whose GPU breaks after its first trial, for the broken-node tests.

With ``DVT_HPO_TEST_BROKEN_HOST`` set (to a marker file's path) in a worker's environment, the
first trial of that worker runs as usual and leaves the marker; every later one raises
``RuntimeError: CUDA error: unspecified launch failure`` at once, as a GPU that fell over
does. With ``DVT_HPO_TEST_BROKEN_TASK`` set too, only the Slurm array task of that id is
broken. Elsewhere each trial reports ``config["curve"]`` plus its ``x`` (``sleep_s`` after
each report) and returns the last point; ``config["fail_above"]``: a trial whose ``x`` is
above it raises ``ValueError`` (a failure of its params, not of the machine).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

BROKEN_ENV = "DVT_HPO_TEST_BROKEN_HOST"
BROKEN_TASK_ENV = "DVT_HPO_TEST_BROKEN_TASK"
CUDA_ERROR = (
    "CUDA error: unspecified launch failure\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect."
)


def _broken() -> Path | None:
    marker = os.environ.get(BROKEN_ENV)
    if not marker:
        return None
    task = os.environ.get(BROKEN_TASK_ENV)
    if task is not None and os.environ.get("SLURM_ARRAY_TASK_ID") != task:
        return None
    return Path(marker)


def run(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    marker = _broken()
    if marker is not None:
        if marker.exists():
            raise RuntimeError(CUDA_ERROR)
        marker.write_text(f"{os.getpid()}\n")
    x = float(config["x"])
    fail_above = config.get("fail_above")
    if fail_above is not None and x > float(fail_above):
        raise ValueError(f"x={x} is above {fail_above}: this config cannot train")
    last = 0.0
    for step, value in enumerate(config.get("curve", [0.1, 0.2, 0.3])):
        last = float(value) + x
        ctx.report(step, {"score": last})
        time.sleep(float(config.get("sleep_s", 0.0)))
    return {"score": last}
