"""Entry points for the ``trials.resume`` tests (tests/recovery/test_resume.py).

``train``: the built-in trainer (``dvt_hpo.train:run``), through a ctx that holds the first
attempt after it saved the state of step ``$DVT_TEST_HOLD_AT``: it writes
``$DVT_TEST_HOLD_FILE`` and sleeps until it is stopped, so a test interrupts it at a known
epoch (SIGTERM of the worker, or ``kill -9``) without racing the training
(``$DVT_TEST_HOLD_TRIAL``: the trial that holds, when not trial 0).

``dvt``: the deepvisiontools backend through the same holding ctx.

``counter``: an entry point of its own using ``ctx.load_state`` / ``ctx.save_state``: each
epoch ``value = value * 0.5 + x`` (``x`` the param), reported as ``score``; ``epochs`` epochs
(config); ``fail_at``: raise after saving that epoch (a trial that fails by itself); the
same hold as ``train`` (or ``config["hold"] = {"at": k, "file": path}``); ``final_hold``: a
file, trial 0 writes it and holds in its final step, after saving its last epoch;
``sleep_s``: each epoch's work; stopped with ``trials.pause`` on, it saves the epoch it was
stopped at (docs/pause.md); ``cost``: also report ``cost`` = the epoch (a second objective); ``final_s``: a final step after the last save (the kill soak). Each attempt appends ``"<trial> <first epoch>"`` to
``config["log"]`` so a test sees where every attempt started; with ``config["epoch_log"]``
it also appends ``"<trial> <epoch>"`` there once each epoch's work is done, so the kill soak
counts the epochs every attempt really trained from the trainer's side, not from the
orchestrator's attrs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from dvt_hpo import TrialPruned

ENV_HOLD_AT = "DVT_TEST_HOLD_AT"
ENV_HOLD_FILE = "DVT_TEST_HOLD_FILE"
ENV_HOLD_TRIAL = "DVT_TEST_HOLD_TRIAL"


def _hold(step: int | None, ctx: Any, config: dict[str, Any] | None = None) -> None:
    hold = (config or {}).get("hold") or {}  # a Slurm job may not see the test's variables
    at = hold.get("at", os.environ.get(ENV_HOLD_AT))
    if at is None or step != int(at):
        return
    # Only trial ``hold.trial`` (or $DVT_TEST_HOLD_TRIAL; default 0, the chain's first
    # attempt) holds: a copy runs to its end.
    if ctx.trial_number != int(hold.get("trial", os.environ.get(ENV_HOLD_TRIAL, 0))):
        return
    Path(hold.get("file") or os.environ[ENV_HOLD_FILE]).write_text(f"{ctx.trial_number} {step}\n")
    while True:  # ended by SIGTERM (TrialStopped) or SIGKILL
        time.sleep(0.05)


class _Holding:
    """``ctx`` with ``save_state`` holding after the save of the hold step."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def save_state(self, obj: Any, *, step: int | None = None, force: bool = False) -> bool:
        saved = self._ctx.save_state(obj, step=step, force=force)
        if saved:
            _hold(step, self._ctx)
        return saved

    def mark_saved(self, path: Any, *, step: int | None, save_s: float) -> None:
        self._ctx.mark_saved(path, step=step, save_s=save_s)
        _hold(step, self._ctx)


def train(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    from dvt_hpo.train import run

    return run(config, _Holding(ctx))


def dvt(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    """The deepvisiontools backend, with the same hold as ``train``."""
    from dvt_hpo.backends.deepvisiontools import run

    return run(config, _Holding(ctx))


def counter(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    state = ctx.load_state() or {"epoch": -1, "value": 0.0}
    first = state["epoch"] + 1
    if config.get("log"):
        with open(config["log"], "a", encoding="utf-8") as f:
            f.write(f"{ctx.trial_number} {first}\n")
    value = float(state["value"])
    x = float(ctx.params["x"])
    for epoch in range(first, int(config["epochs"])):
        value = value * 0.5 + x
        if config.get("sleep_s"):
            time.sleep(float(config["sleep_s"]))  # an epoch's work
        if config.get("epoch_log"):
            # Written once the work is done, before the report and the save: a kill after this
            # line and before the save is the one epoch a copy may redo.
            with open(config["epoch_log"], "a", encoding="utf-8") as f:
                f.write(f"{ctx.trial_number} {epoch}\n")
        metrics = {"score": value, **({"cost": float(epoch)} if config.get("cost") else {})}
        try:
            ctx.report(epoch, metrics)
        except TrialPruned:
            if ctx.pause_enabled:  # docs/pause.md: the stop may be a pause, continue from here
                ctx.save_state({"epoch": epoch, "value": value}, force=True)
            raise
        ctx.save_state({"epoch": epoch, "value": value}, force=True)
        if config.get("fail_at") == epoch:
            raise RuntimeError(f"failed by itself at epoch {epoch}")
        _hold(epoch, ctx, config)
    if config.get("final_hold") and ctx.trial_number == 0:
        # The final step after the last save (an export, a test evaluation): trial 0 holds in
        # it until it is killed.
        Path(config["final_hold"]).write_text("0 final\n")
        while True:
            time.sleep(0.05)
    if config.get("final_s"):
        time.sleep(float(config["final_s"]))  # a final step after the last save
    return {"score": value}
