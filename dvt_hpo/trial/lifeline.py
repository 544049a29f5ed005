"""A process that dies with its parent: Linux's parent-death signal (``PR_SET_PDEATHSIG``).

One rule for the trial process (its parent is the orchestrator, the torchrun agent or the warm
template) and for the warm template's forked children: ask the kernel for SIGKILL when the
parent *thread* exits, then check the parent did not die before the request (the caller
compares ``os.getppid()`` with the parent it expected). Stdlib only.
"""

from __future__ import annotations

import signal
import sys

_PR_SET_PDEATHSIG = 1


def set_parent_death_signal() -> bool:
    """Ask Linux to SIGKILL this process when its parent thread exits; whether it was set
    (False off Linux or without libc's ``prctl``: best effort)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


__all__ = ["set_parent_death_signal"]
