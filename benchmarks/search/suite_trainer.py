"""Any family of the search suite as a dvt-hpo trainer: ``trainer.entrypoint: suite_trainer:run``.

Each step reports the family's value of the trial's config (``config["hp"]``) on
``config["task"]``, so samplers and pruners see through the real orchestrator what they would
see from a training. Compute is counted in steps as ``lcbench_trainer`` counts epochs: each step
appends one byte to ``config["epochs_file"]``, and a trial that starts once
``config["budget_epochs"]`` are spent raises :class:`BudgetSpent` (the study's
``max_failures: 1`` ends the run). The family named by ``$SUITE_FAMILY`` is loaded at import, so
the warm trial template holds it and every forked trial shares it.

With ``trials.pause`` a trial the pruner stops is paused: the trainer writes the step it reached
into ``ctx.resume_dir`` (its own format, a small JSON file, so no trial imports torch), and the
continuation reads it and reports only the steps after it (the orchestrator splices the chain's
earlier reports in front).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from families import family  # noqa: E402

if os.environ.get("SUITE_FAMILY"):
    _warm = family(os.environ["SUITE_FAMILY"])
    _warm.curve(_warm.tasks[0], _warm.trainer_defaults())


STATE_FILE = "suite_state.json"  # in ctx.resume_dir: {"step": the last step trained}


class BudgetSpent(RuntimeError):
    """The study's budget of steps is spent: the benchmark's signal to stop launching trials."""


def run(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    fam = family(str(config["family"]))
    budget, counter = config.get("budget_epochs"), config.get("epochs_file")
    if budget is not None and counter and os.path.exists(counter):
        spent = os.path.getsize(counter)
        if spent >= int(budget):
            raise BudgetSpent(f"epoch budget spent ({spent} of {budget})")
    from dvt_hpo.atomic import read_json
    from dvt_hpo.exceptions import TrialPruned

    values = fam.curve(str(config["task"]), config["hp"])
    folder = getattr(ctx, "resume_dir", None)
    state = read_json(Path(folder) / STATE_FILE) if folder is not None else None
    first = int(state["step"]) + 1 if isinstance(state, dict) and "step" in state else 1
    fd = os.open(counter, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if counter else None
    try:
        for step in range(first, len(values) + 1):
            if fd is not None:
                os.write(fd, b".")
            try:
                ctx.report(step, {"value": float(values[step - 1])})
            except TrialPruned:
                if folder is not None and getattr(ctx, "pause_enabled", False):
                    _save(ctx, Path(folder), step)  # the stop may be a pause
                raise
    finally:
        if fd is not None:
            os.close(fd)
    return {"value": float(values[-1])}


def _save(ctx: Any, folder: Path, step: int) -> None:
    from dvt_hpo.atomic import write_json_atomic

    began = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder / STATE_FILE, {"step": step})
    ctx.mark_saved(folder / STATE_FILE, step=step, save_s=time.perf_counter() - began)
