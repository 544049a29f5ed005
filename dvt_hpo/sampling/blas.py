"""One BLAS thread for a sampler's linear algebra, so a seeded study samples the same trials
whatever the machine's core count or ``OPENBLAS_NUM_THREADS``.

OpenBLAS (numpy's and scipy's) splits a factorization or a product among its threads in blocks
that depend on the thread count, and so sums in another order: the last bits change, and a
sampler that picks the best of many candidates can then pick another one. threadpoolctl sets
every BLAS and OpenMP library loaded in the process to one thread for the ``with`` block and
restores them after (a process-wide setting: nothing else of the orchestrator runs BLAS then).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

__all__ = ["single_thread_blas"]

_controller: Any = None


def single_thread_blas() -> AbstractContextManager[Any]:
    """A context in which numpy's and scipy's BLAS and LAPACK run on one thread."""
    global _controller
    if _controller is None:
        # The libraries must be loaded to be found: scipy's linear algebra brings its own BLAS.
        import scipy.linalg  # noqa: F401
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController()
    return _controller.limit(limits=1)
