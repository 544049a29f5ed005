"""The LCBench surrogate as a dvt-hpo trainer: ``trainer.entrypoint: lcbench_trainer:run``.

Each epoch reports the surrogate's validation accuracy (and cross-entropy, and the predicted
training time so far) for the trial's config on ``config["task"]``, so samplers and pruners
see what they would see from a real training, through the real orchestrator (warm trial
processes, reports and pruning over the control channel, the study database).

The surrogate is loaded at import, so the warm template loads it once and every forked trial
shares it. Compute is counted in epochs: each trained epoch appends one byte to
``config["epochs_file"]`` (``O_APPEND``, so concurrent trials and workers add up), and a trial
that starts once ``config["budget_epochs"]`` are spent raises :class:`BudgetSpent` before
training anything; the benchmark's study sets ``study.max_failures: 1``, so that failure ends
the run.

``config["sleep_scale"]`` (default 0: no sleep) makes each epoch take the surrogate's predicted
time of that epoch times the scale, so that with several trials at a time they finish in the
order the real trainings would (benchmarks/search/search_efficiency.py ``--parallel``).
"""

from __future__ import annotations

import os
import time
from typing import Any

from lcbench_surrogate import MAX_EPOCHS, Surrogate

SURROGATE = Surrogate()


class BudgetSpent(RuntimeError):
    """The study's epoch budget is spent: the benchmark's signal to stop launching trials."""


def run(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    task = str(config["task"])
    epochs = int(config.get("epochs", MAX_EPOCHS))
    budget = config.get("budget_epochs")
    counter = config.get("epochs_file")
    if budget is not None and counter and os.path.exists(counter):
        spent = os.path.getsize(counter)
        if spent >= int(budget):
            raise BudgetSpent(f"epoch budget spent ({spent} of {budget})")
    curve = SURROGATE.curve(task, config["hp"], epochs)
    acc, ce, seconds = curve["val_accuracy"], curve["val_cross_entropy"], curve["time"]
    scale = float(config.get("sleep_scale", 0.0))
    fd = os.open(counter, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if counter else None
    try:
        for epoch in range(1, epochs + 1):
            if scale > 0:
                before = float(seconds[epoch - 2]) if epoch > 1 else 0.0
                time.sleep(max(0.0, float(seconds[epoch - 1]) - before) * scale)
            if fd is not None:
                os.write(fd, b".")
            # Raises TrialPruned when the study's pruner stops the trial here.
            ctx.report(
                epoch,
                {
                    "val_accuracy": float(acc[epoch - 1]),
                    "val_cross_entropy": float(ce[epoch - 1]),
                    "time": float(seconds[epoch - 1]),
                },
            )
    finally:
        if fd is not None:
            os.close(fd)
    return {
        "val_accuracy": float(acc[-1]),
        "val_cross_entropy": float(ce[-1]),
        "time": float(seconds[-1]),
    }
