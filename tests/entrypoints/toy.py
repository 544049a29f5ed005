"""A behaviour toy: ``run(config, ctx)`` does what ``config`` says, for fault tests.

``config["actions"]`` is the program, run in order (default: ``[{"do": "curve"}]``). Every
action may carry ``"rank": 1`` or ``"rank": [0, 2]`` to run only on those ranks.

=====================  ===================================================================
``curve``              report ``config["curve"]`` (or the action's ``values``) at steps
                       0, 1, ...; a number ``v`` is reported as ``{metric: v}`` (``metric``
                       defaults to ``config["metric"]`` or ``"score"``), a dict as is;
                       ``sleep_s`` after each report
``report``             ``ctx.report(step, metrics)``
``attr``               ``ctx.set_user_attr(key, value)``
``sleep``              ``time.sleep(seconds)`` (interrupted by SIGTERM via TrialStopped)
``raise``              raise the builtin exception ``type`` (default RuntimeError) with
                       ``message``
``sys_exit``           ``sys.exit(code)``
``exit``               ``os._exit(code)``: dies without a result, like a hard crash
``segfault``           SIGSEGV to itself
``allocate``           keep a ``bytearray(bytes)`` alive (MemoryError under RLIMIT_AS)
``spawn``              start a child process (a stand-in for a dataloader worker) sleeping
                       ``seconds``, holding the trial's stdout and stderr (``new_session:
                       true``: in a session of its own); its pid goes to user attr
                       ``child_pid``
``ignore_sigterm``     ignore SIGTERM from here on (only SIGKILL ends it)
``drop_sigterm``       SIGTERM to itself inside a weakref callback, where Python drops the
                       handler's TrialStopped (as in a garbage collection); then go on
``find_batch_size``    ``ctx.find_batch_size`` with a fits() that fits up to ``capacity``
                       (``capacity_by_rank`` overrides per rank; ``oom_above: true`` raises
                       MemoryError instead of returning False); ``device`` names the device
``print``              print ``text`` to stdout ``times`` times (a chatty trainer)
``write``              write ``text`` to ``path``
``read``               read ``path`` (with ``write``, a FIFO makes two ranks meet: each
                       blocks until the other opens it)
``wait_file``          wait until ``path`` exists (a gate the test opens), at most
                       ``timeout_s`` (default 60), then go on
=====================  ===================================================================

``config["finally_file"]``: a path the toy appends ``"finally rank R"`` to from a ``finally``
block, to show that a stop let cleanup run. ``config["return"]``: the metrics to return
(default: the last curve point, or None).
"""

from __future__ import annotations

import builtins
import os
import signal
import subprocess
import sys
import time
from typing import Any

from tests.entrypoints.dropped import deliver_in_weakref_callback

_kept: list[bytearray] = []


def _for_me(action: dict[str, Any], rank: int) -> bool:
    ranks = action.get("rank")
    if ranks is None:
        return True
    if isinstance(ranks, int):
        return ranks == rank
    return rank in ranks


def _point(value: Any, metric: str) -> dict[str, float]:
    return dict(value) if isinstance(value, dict) else {metric: float(value)}


def _drop_sigterm() -> None:
    dropped = deliver_in_weakref_callback(signal.SIGTERM)
    if [type(d.exc_value).__name__ for d in dropped] != ["TrialStopped"]:
        raise RuntimeError(f"toy: the SIGTERM was not dropped: {dropped}")


def run(config: dict[str, Any], ctx: Any) -> dict[str, float] | None:
    metric = config.get("metric", "score")
    last: dict[str, float] | None = None
    try:
        for action in config.get("actions", [{"do": "curve"}]):
            if not _for_me(action, ctx.rank):
                continue
            do = action["do"]
            if do == "curve":
                values = action.get("values", config.get("curve", []))
                for step, value in enumerate(values):
                    last = _point(value, metric)
                    ctx.report(step, last)
                    if action.get("sleep_s"):
                        time.sleep(action["sleep_s"])
            elif do == "report":
                last = _point(action["metrics"], metric)
                ctx.report(action["step"], last)
            elif do == "attr":
                ctx.set_user_attr(action["key"], action["value"])
            elif do == "sleep":
                time.sleep(action["seconds"])
            elif do == "raise":
                exc_type = getattr(builtins, action.get("type", "RuntimeError"))
                raise exc_type(action.get("message", "toy failure"))
            elif do == "sys_exit":
                sys.exit(action.get("code", 1))
            elif do == "exit":
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(action.get("code", 1))
            elif do == "segfault":
                os.kill(os.getpid(), signal.SIGSEGV)
            elif do == "allocate":
                _kept.append(bytearray(action["bytes"]))
            elif do == "spawn":
                child = subprocess.Popen(
                    [sys.executable, "-c", f"import time; time.sleep({action.get('seconds', 60)})"],
                    start_new_session=action.get("new_session", False),
                )
                ctx.set_user_attr("child_pid", child.pid)
            elif do == "drop_sigterm":
                _drop_sigterm()
            elif do == "ignore_sigterm":
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            elif do == "find_batch_size":
                capacity = action.get("capacity_by_rank", {}).get(
                    str(ctx.rank), action.get("capacity", 64)
                )
                oom = action.get("oom_above", False)

                def fits(n: int, capacity: int = capacity, oom: bool = oom) -> bool:
                    if n > capacity and oom:
                        raise MemoryError(f"toy: batch {n} > capacity {capacity}")
                    return n <= capacity

                choice = ctx.find_batch_size(fits, device=action.get("device", "toy"))
                if choice is not None:
                    last = {**(last or {}), "batch_size": float(choice.batch_size)}
            elif do == "print":
                for _ in range(int(action.get("times", 1))):
                    print(action.get("text", ""))
            elif do == "write":
                with open(action["path"], "w") as f:
                    f.write(action.get("text", ""))
            elif do == "read":
                with open(action["path"]) as f:
                    f.read()
            elif do == "wait_file":
                deadline = time.monotonic() + action.get("timeout_s", 60)
                while not os.path.exists(action["path"]) and time.monotonic() < deadline:
                    time.sleep(0.05)
            else:
                raise ValueError(f"toy: unknown action {do!r}")
    finally:
        if config.get("finally_file"):
            with open(config["finally_file"], "a") as f:
                f.write(f"finally rank {ctx.rank}\n")
    if "return" in config:
        return config["return"]
    return last
