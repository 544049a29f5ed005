"""A signal whose handler's exception Python drops, as in a garbage collection.

Stdlib only: the toy entry point uses it inside trial processes, the tests in their own.
"""

from __future__ import annotations

import os
import sys
import weakref
from typing import Any


class _Collected:
    pass


def deliver_in_weakref_callback(signum: int) -> list[Any]:
    """Send ``signum`` to this process inside a weakref callback: its handler runs there, and
    an exception it raises goes to ``sys.unraisablehook`` ("Exception ignored") instead of the
    caller. Returns what the hook got."""
    dropped: list[Any] = []
    hook, sys.unraisablehook = sys.unraisablehook, dropped.append

    def callback(_ref: object) -> None:
        os.kill(os.getpid(), signum)
        for _ in range(1000):  # the handler runs at the next bytecode boundary, in here
            pass

    try:
        obj = _Collected()
        ref = weakref.ref(obj, callback)
        del obj
    finally:
        sys.unraisablehook = hook
    if ref() is not None:
        raise RuntimeError("the object was not collected: the callback did not run")
    return dropped
