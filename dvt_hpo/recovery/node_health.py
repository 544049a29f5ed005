"""Whether a trial failed for the machine rather than its params, and when a worker's node is
broken: pure rules (stdlib only), read by the trial run, the loop and recovery.

A failure is *of the machine* when its reason matches :data:`MACHINE_ERRORS`: a GPU that fell
off the bus or was lost, no CUDA device or driver where one was given, an uncorrectable ECC
error, CUDA's "unspecified launch failure" or "unknown error", NCCL's system, CUDA and remote
errors, or the out-of-memory killer of the worker's own cgroup. Errors that follow the code or
the params are left out on purpose: a device-side assert, an illegal memory access, NCCL's
"invalid usage", a plain ``CUDA out of memory`` (the batch size or the model's width), a
``ValueError``. Such a failure is not the trial's: its attempt is retried with the same params
and does not count towards ``study.n_trials`` (like an interrupted attempt), and it counts for
neither ``study.max_failures`` nor the "first trials failed alike" rule of
:mod:`dvt_hpo.stopping.rules`, which are about the params.

A worker's node is *broken* when its last ``trials.node_failures`` finished trials (default
:data:`NODE_FAILURES`) all failed of the machine, at any point of its run: it stops launching,
ends its running trials (retried too) and exits 1 naming its host. Any machine error counts in
the row, not only the same one: a GPU that dies says "unspecified launch failure", then
"device lost", then "no CUDA-capable device". A trial that completed, was pruned or failed for
another reason ends the row; attempts the worker itself interrupted are skipped.

Each attempt's machine failure is retried at most :func:`machine_retry_limit` times per chain
of copies: a config whose every attempt meets a "machine" error on different workers is likely
the cause itself (an NCCL error in a model that hangs a rank), and would otherwise be retried
forever without counting. Past the limit its last attempt stays a plain, counted FAIL.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "CGROUP_OOM_REASON",
    "MACHINE_ERRORS",
    "NODE_FAILURES",
    "BrokenNode",
    "broken_node",
    "machine_failure",
    "machine_retry_limit",
]

NODE_FAILURES = 3  # trials.node_failures: machine failures in a row that stop a worker

# What the orchestrator writes in a trial's reason when its cgroup's OOM killer ended it.
CGROUP_OOM_REASON = "killed by the out-of-memory killer of this worker's cgroup"

# (kind, pattern): the first match names the kind. Case-insensitive; searched anywhere in the
# reason (which may start with "rank 1: RuntimeError: ...").
MACHINE_ERRORS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.IGNORECASE))
    for kind, pattern in (
        ("CUDA launch failure", r"unspecified launch failure"),
        (
            "GPU lost",
            r"fallen off the bus|GPU is lost|device (?:was |is )?lost"
            r"|cudaErrorDevicesUnavailable|busy or unavailable|cudaErrorDeviceUninitialized",
        ),
        (
            "no CUDA device",
            r"no CUDA-capable device|No CUDA GPUs are available|no NVIDIA driver"
            r"|CUDA driver initialization failed|Failed to initialize NVML"
            r"|Driver/library version mismatch|CUDA driver version is insufficient"
            r"|invalid device ordinal",
        ),
        ("ECC error", r"\bECC\b"),
        ("CUDA unknown error", r"CUDA error: unknown error|cudaErrorUnknown"),
        (
            "NCCL error",
            r"unhandled system error|unhandled cuda error|ncclSystemError"
            r"|ncclUnhandledCudaError|ncclRemoteError|ncclInternalError"
            r"|NCCL error.*(?:remote process exited|network error|internal error)",
        ),
        ("cgroup out-of-memory kill", re.escape(CGROUP_OOM_REASON)),
    )
)


def machine_failure(reason: str | None) -> str | None:
    """The kind of machine error a failure's reason names (see :data:`MACHINE_ERRORS`), or
    ``None`` when it is not one (the params', the code's, or unknown)."""
    if not reason:
        return None
    for kind, pattern in MACHINE_ERRORS:
        if pattern.search(reason):
            return kind
    return None


def machine_retry_limit(node_failures: int) -> int:
    """How many machine failures of one config are retried: enough for two broken nodes to
    fail it until each stops (a broken worker takes the copies of its own failures first, as
    Optuna hands out the oldest WAITING trial), and no more."""
    return 2 * node_failures


class Finished(Protocol):
    """What the rule reads of a finished trial (:class:`~dvt_hpo.results.outcome.TrialOutcome`)."""

    number: int
    state: str
    reason: str | None
    interrupted: bool
    machine: str | None


@dataclass(frozen=True)
class BrokenNode:
    """Why a worker stops: the trials of the row, their kinds, the last reason."""

    numbers: tuple[int, ...]
    kinds: tuple[str, ...]  # distinct, in order of first appearance
    reason: str  # the last one's, its first line

    def message(self, host: str) -> str:
        numbers = ", ".join(map(str, self.numbers))
        return (
            f"node {host} looks broken, this worker stops: its last {len(self.numbers)} trials "
            f"({numbers}) failed with an error of the machine, not of their params "
            f"({', '.join(self.kinds)}): {self.reason}; they are retried with their params "
            "by another worker and do not count in study.n_trials "
            "(trials.node_failures sets this rule)"
        )


def broken_node(outcomes: Sequence[Finished], node_failures: int) -> BrokenNode | None:
    """Whether this worker's last ``node_failures`` finished trials all failed of the machine
    (``0`` turns the rule off). Attempts the worker interrupted itself are skipped."""
    if node_failures <= 0:
        return None
    row: list[Finished] = []
    for outcome in reversed(outcomes):
        if outcome.machine is None and outcome.interrupted:
            continue  # stopped by this worker: says nothing of the node
        if outcome.state != "FAIL" or outcome.machine is None:
            break
        row.append(outcome)
        if len(row) == node_failures:
            break
    if len(row) < node_failures:
        return None
    row.reverse()
    kinds = tuple(dict.fromkeys(o.machine for o in row if o.machine is not None))
    # Its first line: CUDA's errors go on with a paragraph of advice.
    reason = (row[-1].reason or "").strip().splitlines()[:1] or ["unknown"]
    return BrokenNode(tuple(o.number for o in row), kinds, reason[0])
