"""Named steps of a trial's bookkeeping where the crash-recovery tests kill the worker.

A worker (``dvt-hpo run``) dies at instants nobody chooses: preemption, ``scancel``, a node
lost, the out-of-memory killer. ``docs/recovery.md`` lists each step of starting, running,
finishing and recovering a trial, what a kill there leaves and what repairs it; the tests
prove each row by starting a worker with ``DVT_HPO_KILL_AT=<step>``, which SIGKILLs the
worker itself when it reaches that step (no ``finally``, no ``atexit``: what a real kill
leaves). The variable is read once, at import; without it :func:`reached` is one comparison.
"""

from __future__ import annotations

import os
import signal

ENV_KILL_AT = "DVT_HPO_KILL_AT"

# The steps, in the order a trial goes through them (docs/recovery.md has one row each).
STEPS = (
    "ask",  # study.ask returned: the trial is RUNNING, nothing else is written
    "start:heartbeat",  # its first heartbeat is recorded; no params yet
    "start:params",  # its params are sampled and stored; its process is not started
    "trial:running",  # its process runs
    "trial:ended",  # its process exited (maybe after writing its result); nothing recorded
    "record:before_tell",  # its attrs are recorded; Optuna is not told yet
    "retry:marked",  # the attempt is marked for a retry; it is still RUNNING
    "retry:failed",  # the attempt is FAIL; its copy is not enqueued yet
    "retry:locked",  # the repair lock is held; the copy is not enqueued yet
    "retry:enqueued",  # the copy is enqueued; the repair lock is still held
    "finished:attrs",  # a sweep recording a dead worker's finished trial wrote its attrs
)

_KILL_AT = os.environ.get(ENV_KILL_AT) or None


def reached(step: str) -> None:
    """The worker reached ``step``: SIGKILL it there when the tests asked for that step."""
    if _KILL_AT is not None and step == _KILL_AT:
        os.kill(os.getpid(), signal.SIGKILL)


__all__ = ["ENV_KILL_AT", "STEPS", "reached"]
