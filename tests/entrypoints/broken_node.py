"""A trainer on a node whose GPU breaks after its first trial, for the broken-node tests.

With ``DVT_HPO_TEST_BROKEN_HOST`` set (to a marker file's path) in a worker's environment, the
first trial of that worker runs as usual and leaves the marker; every later one raises
``RuntimeError: CUDA error: unspecified launch failure`` at once, as a GPU that fell over
does. With ``DVT_HPO_TEST_BROKEN_TASK`` set too, only the Slurm array task of that id is
broken. With ``DVT_HPO_TEST_BROKEN_HANG=1`` the node's second trial hangs instead (a trial
stuck on the broken GPU, for the worker to end when it stops). Trials of one node count
themselves in the marker under a lock, as several may start at once. Elsewhere each trial reports ``config["curve"]`` plus its ``x`` (``sleep_s`` after
each report) and returns the last point; ``config["fail_above"]``: a trial whose ``x`` is
above it raises ``ValueError`` (a failure of its params, not of the machine).
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Any

BROKEN_ENV = "DVT_HPO_TEST_BROKEN_HOST"
BROKEN_TASK_ENV = "DVT_HPO_TEST_BROKEN_TASK"
BROKEN_HANG_ENV = "DVT_HPO_TEST_BROKEN_HANG"
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


def _count(marker: Path) -> int:
    """This trial's index among the node's trials (0 for its first)."""
    with marker.open("a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        index = len(f.read().splitlines())
        f.write(f"{os.getpid()}\n")
        return index


def run(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    marker = _broken()
    if marker is not None:
        index = _count(marker)
        if index == 1 and os.environ.get(BROKEN_HANG_ENV) == "1":
            time.sleep(3600)  # stuck until the worker ends it
        if index >= 1:
            raise RuntimeError(CUDA_ERROR)
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
