"""Two trials that can only finish together: proof that they run at the same time.

The first trial to arrive writes to a FIFO, which blocks until another process opens it for
reading; the second reads it. Run one at a time, the first would wait until its timeout.
"""

from __future__ import annotations

import os
from typing import Any

from tests.entrypoints import toy


def run(config: dict[str, Any], ctx: Any) -> dict[str, float] | None:
    path = config["fifo"]
    try:
        os.close(os.open(path + ".first", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        with open(path) as f:
            assert f.read() == "hello"
    else:
        with open(path, "w") as f:
            f.write("hello")
    ctx.set_user_attr("omp", os.environ.get("OMP_NUM_THREADS"))
    ctx.set_user_attr("cuda", os.environ.get("CUDA_VISIBLE_DEVICES"))
    return toy.run({"curve": [0.5]}, ctx)
