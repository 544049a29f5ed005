"""A process that dies with its parent: Linux's parent-death signal (``PR_SET_PDEATHSIG``).

One rule for the trial process (its parent is the orchestrator, the torchrun agent or the warm
template), for the warm template's forked children and for a ``trainer.command`` script (its
parent is the trial process): ask the kernel for SIGKILL when the parent *thread* exits, then
check the parent did not die before the request (:func:`set_parent_death_signal`, the caller
compares ``os.getppid()`` with the parent it expected; :func:`dies_with_this_process` does both
in a child before it runs its program). Stdlib only.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl`` (None off Linux or without it), looked up once: a child forked later
    calls it without loading anything."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def set_parent_death_signal() -> bool:
    """Ask Linux to SIGKILL this process when its parent thread exits; whether it was set
    (False off Linux or without libc's ``prctl``: best effort)."""
    prctl = _prctl()
    return prctl is not None and prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0


def dies_with_this_process() -> Callable[[], None] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen`: the child asks for SIGKILL when this
    process dies, before it runs its program, and kills itself if this process died before the
    request. The signal stays set across ``exec`` (except into a set-user-ID program) and
    follows the *thread* that starts the child, which must outlive it:
    :func:`dvt_hpo.command.script.run` waits for its script in the thread that started it.
    None off Linux or without ``prctl`` (best effort, as :func:`set_parent_death_signal`).

    Everything the child calls is looked up here, in the parent: between ``fork`` and ``exec``
    of a process with threads the child must not load a library nor take a lock another thread
    may have held."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()
    sigkill = int(signal.SIGKILL)
    getppid, getpid, kill = os.getppid, os.getpid, os.kill

    def in_the_child() -> None:
        prctl(_PR_SET_PDEATHSIG, sigkill, 0, 0, 0)
        if getppid() != parent:  # this process died before the request: no signal will come
            kill(getpid(), sigkill)

    return in_the_child


__all__ = ["dies_with_this_process", "set_parent_death_signal"]
