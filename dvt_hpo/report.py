"""Report a training script's metrics to a dvt-hpo study: ``report(step, val_f1=0.91)``.

For scripts run by ``trainer.command``::

    from dvt_hpo.report import report

    for epoch in range(args.epochs):
        ...
        report(epoch, loss=val_loss, macro_f1=f1)

Inside a study, each call goes to the trial process (over the Unix socket named by
``$DVT_HPO_REPORT``), which reports it to the study like ``ctx.report`` and answers with the
pruning decision; when the study prunes the trial, ``report`` raises
``SystemExit(PRUNED_EXIT_CODE)`` so the script ends at once (its ``finally`` blocks run). A
script that swallows that is stopped: SIGTERM, then SIGKILL after ``trials.stop_grace_s``.
Outside a study (no ``$DVT_HPO_REPORT``) it prints ``step 3: loss=0.1234 macro_f1=0.91`` and
returns, so the script runs by hand as before.

Each step is reported once, with all its metrics in one call (a second report of a step raises
``ValueError``). Metric values are anything ``float()`` takes (numbers, 0-d tensors, numpy
scalars). Under torchrun every rank may call it; only rank 0's reports count.

This file is stdlib only and imports nothing else from dvt-hpo: a team may copy it into its own
code base to keep its scripts free of the dependency.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["ENV_REPORT", "PRUNED_EXIT_CODE", "check_report", "report"]

# The trial process sets this to its report socket's path; absent outside a study.
ENV_REPORT = "DVT_HPO_REPORT"
# The exit status of a script that ``report`` ended because the study pruned the trial. The
# same number is the trial process's own exit status for a pruned trial (dvt_hpo.wire.protocol.EXIT_PRUNED).
PRUNED_EXIT_CODE = 3

_lock = threading.Lock()
# (pid, socket, buffered reader): a forked child (e.g. a data-loader worker) must not share
# its parent's connection, whose replies would interleave.
_connection: tuple[int, socket.socket, Any] | None = None


def report(step: int, metrics: Mapping[str, Any] | None = None, **more: Any) -> None:
    """Report the metrics of ``step`` (an int >= 0, e.g. the epoch).

    Raises ``SystemExit(PRUNED_EXIT_CODE)`` when the study prunes the trial, ``ValueError`` or
    ``TypeError`` for a bad step or metric (also those the study refuses, such as a step
    reported twice), ``ConnectionError`` when the trial process is gone, ``RuntimeError``
    when the trial process could not report it.
    """
    values = check_report(step, {**(metrics or {}), **more})
    address = os.environ.get(ENV_REPORT)
    if not address:
        shown = " ".join(f"{name}={value:.6g}" for name, value in values.items())
        print(f"step {step}: {shown}".rstrip(), flush=True)
        return
    line = json.dumps({"step": step, "metrics": values}, allow_nan=True) + "\n"
    with _lock:
        reply = _exchange(address, line.encode("utf-8"))
    if reply.get("prune"):
        raise SystemExit(PRUNED_EXIT_CODE)
    if reply.get("error"):
        # What the study refused (a step reported twice, a bad value) is raised as it was.
        kinds = {"ValueError": ValueError, "TypeError": TypeError}
        raise kinds.get(reply.get("error_type", ""), RuntimeError)(reply["error"])


def check_report(step: Any, metrics: Any) -> dict[str, float]:
    """The one rule for a report's arguments, here and for ``ctx.report`` in the trial process:
    ``step`` an int >= 0, at least one metric, each named by a non-empty string and a number
    (``float()`` takes 0-d tensors and numpy scalars without importing either)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"report step must be an int >= 0, got {step!r}")
    if not isinstance(metrics, Mapping):
        raise TypeError(f"report metrics must be a dict of numbers, got {metrics!r}")
    if not metrics:
        raise ValueError("report needs at least one metric, e.g. report(step, loss=0.12)")
    clean: dict[str, float] = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"report metric names must be non-empty strings, got {name!r}")
        try:
            clean[name] = float(value)
        except (TypeError, ValueError):
            raise TypeError(
                f"report metric {name!r} must be a number, got {value!r} ({type(value).__name__})"
            ) from None
    return clean


def _exchange(address: str, data: bytes) -> dict[str, Any]:
    """Send one request line and read its reply line, connecting first if this process has no
    connection yet."""
    global _connection
    pid = os.getpid()
    if _connection is None or _connection[0] != pid:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(address)
        except OSError as exc:
            sock.close()
            raise ConnectionError(
                f"cannot reach the dvt-hpo trial process at ${ENV_REPORT}={address}: {exc}"
            ) from None
        _connection = (pid, sock, sock.makefile("rb"))
    _, sock, reader = _connection
    try:
        sock.sendall(data)
        line = reader.readline()
    except OSError:
        line = b""
    if not line:
        _connection = None
        raise ConnectionError("the dvt-hpo trial process closed the report connection")
    try:
        reply = json.loads(line)
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        raise ConnectionError(f"unexpected reply from the dvt-hpo trial process: {line[:200]!r}")
    return reply
