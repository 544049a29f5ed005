"""The trial side of ``benchmarks/overheads/trial_cost.py``: timestamps of a trial process's phases.

Imported by a ``sitecustomize.py`` that the benchmark writes into a folder of its own on the
trial processes' ``PYTHONPATH`` (so every cold trial process, and the warm template, imports it
at interpreter start; a forked warm trial inherits it from the template). It imports the trial
process (``dvt_hpo.trial.main``), timing that import, then wraps the functions ``main`` calls
(their module globals, so the code that runs is the real one) with ``time.time()`` marks, and
writes the marks of each trial to ``$DVT_HPO_TRIAL_COST_DIR/<pid>.json`` when ``main`` returns.

Also the trainer: ``run(config, ctx)`` reports once and returns, as the torch-free no-op of
``benchmarks/overheads/start_to_start.py`` does. Stdlib only.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from typing import Any

ENV_DIR = "DVT_HPO_TRIAL_COST_DIR"

_site_t = time.time()
_marks: list[tuple[str, float]] = []
_trial: dict[str, int] = {}


def _mark(name: str) -> None:
    _marks.append((name, time.time()))


def _timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _mark(f"{name}:start")
        try:
            return function(*args, **kwargs)
        finally:
            _mark(f"{name}:end")

    return wrapper


def run(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    score = float(ctx.params.get("x", 0.0))
    ctx.report(0, {"score": score})
    return {"score": score}


def _install() -> None:
    imports_t = time.time()
    import dvt_hpo.trial.main as trial_main
    from dvt_hpo.trial.context import TrialContext

    imported_t = time.time()
    template_pid = os.getpid()
    original_main = trial_main.main

    def resolve(spec: str) -> Callable[..., Any]:
        return _timed("call", original_resolve(spec))

    def main(argv: list[str] | None = None) -> int:
        _marks.clear()
        if os.getpid() == template_pid:  # a cold process: its interpreter start and imports
            _marks.extend([("site", _site_t), ("imports:start", imports_t)])
            _marks.append(("imports:end", imported_t))
        _mark("main:start")
        try:
            return original_main(argv)
        finally:
            _mark("main:end")
            _write()

    original_resolve = trial_main.resolve_entrypoint
    trial_main.resolve_entrypoint = _timed("import", resolve)
    trial_main.main = main
    for name, label in (("_connect", "connect"), ("_context", "context")):
        setattr(trial_main, name, _timed(label, getattr(trial_main, name)))
    trial_main._write_result = _timed("write", trial_main._write_result)
    timed_read = _timed("payload", trial_main.TrialPayload.read)

    def read(path: Any) -> Any:
        payload = timed_read(path)
        _trial["number"] = payload.trial_number
        return payload

    # ``main`` calls ``TrialPayload.read`` only: a stand-in class that times it.
    trial_main.TrialPayload = type("TrialPayload", (), {"read": staticmethod(read)})
    TrialContext.report = _timed("report", TrialContext.report)


def _write() -> None:
    folder = os.environ.get(ENV_DIR)
    if not folder:
        return
    record = {
        "launched": float(os.environ.get("DVT_HPO_LAUNCHED_UNIX") or 0.0),
        "trial": _trial.get("number"),
        "pid": os.getpid(),
        "marks": _marks,
    }
    path = os.path.join(folder, f"{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)


if os.environ.get(ENV_DIR):
    _install()
