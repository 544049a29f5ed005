"""Workers that stopped because their node looks broken (:mod:`dvt_hpo.recovery.node_health`): the
loop's watch over its outcomes, and the record each leaves in the study for ``dvt-hpo status``.

Each stopped worker writes one study system attr of its own (``dvt_hpo:node_stopped:HOST:PID``),
so two workers stopping at the same instant never overwrite each other's record.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from dvt_hpo.optuna_api.private import study_id_of
from dvt_hpo.recovery.node_health import Finished, broken_node

if TYPE_CHECKING:
    import optuna

__all__ = [
    "NODE_STOPPED_PREFIX",
    "NodeWatch",
    "OpenStudy",
    "StoppedNode",
    "format_stopped",
    "record_stopped",
    "stopped_nodes",
]

NODE_STOPPED_PREFIX = "dvt_hpo:node_stopped:"


@dataclass(frozen=True)
class StoppedNode:
    host: str
    pid: int
    stopped: str  # ISO time, UTC
    trials: list[int]  # the row of machine failures (retried)
    kinds: list[str]  # their kinds of machine error
    reason: str  # the last one's reason
    worker: str | None = None  # the Slurm array task ("123_4") or job, if any
    message: str = field(default="", compare=False)  # the one line the worker exited with

    @property
    def key(self) -> str:
        return f"{NODE_STOPPED_PREFIX}{self.host}:{self.pid}"


def _slurm_worker() -> str | None:
    env = os.environ
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    if array and task is not None:
        return f"{array}_{task}"  # as squeue and dvt_hpo.cluster.slurm name it
    return env.get("SLURM_JOB_ID") or None


def record_stopped(storage: Any, study_id: int, node: StoppedNode) -> None:
    storage.set_study_system_attr(study_id, node.key, asdict(node))


def stopped_nodes(storage: Any, study_id: int) -> list[StoppedNode]:
    """The study's stopped workers, oldest first."""
    nodes = []
    for key, value in storage.get_study_system_attrs(study_id).items():
        if key.startswith(NODE_STOPPED_PREFIX) and isinstance(value, dict):
            try:
                nodes.append(StoppedNode(**value))
            except TypeError:
                continue  # written by another version: not ours to read
    return sorted(nodes, key=lambda n: n.stopped)


def format_stopped(nodes: Sequence[StoppedNode]) -> list[str]:
    """``status``'s lines for them (none when no worker stopped)."""
    if not nodes:
        return []
    lines = [f"stopped workers (node looked broken): {len(nodes)}"]
    for n in nodes:
        where = f"{n.host} (pid {n.pid}" + (f", job {n.worker})" if n.worker else ")")
        trials = ", ".join(map(str, n.trials))
        lines.append(f"  {where}  {n.stopped}  trials {trials} ({', '.join(n.kinds)}): {n.reason}")
    return lines


class OpenStudy(Protocol):
    """What the watch uses of the study it runs in: the loop's
    :class:`~dvt_hpo.study.handle.StudyHandle` (from the package above, so named by shape)."""

    @property
    def study(self) -> optuna.Study: ...
    @property
    def storage(self) -> Any: ...
    @property
    def lock(self) -> threading.RLock: ...
    @property
    def db(self) -> Callable[[Callable[[], Any], str], Any]: ...


class NodeWatch:
    """The loop's side of the rule: after each outcome, whether this worker's node looks broken;
    if so its record is written to the study and the message returned, once."""

    def __init__(self, node_failures: int, handle: OpenStudy) -> None:
        self.node_failures = node_failures
        self.handle = handle
        self.host = socket.gethostname()
        self.stopped: StoppedNode | None = None

    def finished(self, outcomes: Sequence[Finished]) -> str | None:
        if self.stopped is not None:
            return None
        broken = broken_node(outcomes, self.node_failures)
        if broken is None:
            return None
        node = StoppedNode(
            host=self.host,
            pid=os.getpid(),
            stopped=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            trials=list(broken.numbers),
            kinds=list(broken.kinds),
            reason=broken.reason[:500],
            worker=_slurm_worker(),
            message=broken.message(self.host),
        )
        self.stopped = node
        handle = self.handle
        # Best effort: the worker exits 1 with the message whether or not the database took it.
        with contextlib.suppress(Exception), handle.lock:
            handle.db(
                lambda: record_stopped(handle.storage, study_id_of(handle.study), node),
                "recording the stopped worker",
            )
        return node.message
