"""One study through ``dvt-hpo run`` until its epoch budget is spent: how the search benchmarks
(``suite.py``, ``search_efficiency.py``) run dvt-hpo, in a scratch folder of their own.

A run that exits other than 0 or 1 (1: the budget's own stop under some cells), or without
saying its epoch budget was spent, is an error naming the study: a benchmark must never read a
half-run study as a result.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml


def scratch(prefix: str) -> Path:
    """A fresh folder, in memory where ``/dev/shm`` can be written (a journal's many small
    writes, not the disk's)."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


def run_until_spent(
    doc: dict[str, Any],
    folder: Path,
    *,
    paths: Sequence[Path],
    what: str,
    env: dict[str, str] | None = None,
) -> tuple[float, int]:
    """Write ``doc`` as ``folder/study.yaml`` and run it to its budget's end, ``paths`` put
    first on ``PYTHONPATH`` (the benchmark's trainers), one thread per process; its wall time
    in seconds and its exit code."""
    (folder / "study.yaml").write_text(yaml.safe_dump(doc))
    run_env = dict(os.environ if env is None else env, OMP_NUM_THREADS="1")
    run_env["PYTHONPATH"] = os.pathsep.join(
        [*map(str, paths), *filter(None, [run_env.get("PYTHONPATH")])]
    )
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "dvt_hpo", "run", "study.yaml"],
        cwd=folder,
        env=run_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    wall_s = time.perf_counter() - start
    if proc.returncode not in (0, 1) or "epoch budget spent" not in proc.stdout:
        raise RuntimeError(
            f"{what}: dvt-hpo run exited {proc.returncode} without spending its budget:\n"
            f"{proc.stdout[-3000:]}"
        )
    return wall_s, proc.returncode
