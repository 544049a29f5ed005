"""The trial result: what a trial process leaves for the orchestrator, as one typed JSON file.

The chief rank writes ``result.json``; another rank that failed writes ``error-rank{R}.json``
(docs/protocol.md). Written by the trial process (:mod:`dvt_hpo.trial.ending` makes it, one pure
function), read by the orchestrator (:mod:`dvt_hpo.study.trial_run`), whose outcome rules
(:mod:`dvt_hpo.results.outcome`) read typed fields instead of probing a dict. Stdlib only.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from dvt_hpo.atomic import read_json, write_json_atomic
from dvt_hpo.config.schema import from_wire_mapping

Status = Literal["ok", "pruned", "stopped", "error"]


class ResultError(ValueError):
    """A result file that does not follow docs/protocol.md."""


@dataclass(frozen=True)
class TrialResult:
    """How one rank of a trial ended. ``ok``: ``metrics`` is what the entry point returned;
    ``pruned``: at ``step``; ``stopped``: by ``signal``; ``error``: ``exc_type``, ``message``,
    ``traceback``, ``out_of_memory`` (and ``reason``, a command trainer's own words)."""

    status: Status
    metrics: dict[str, float] = field(default_factory=dict)
    step: int | None = None
    signal: str | None = None
    rank: int = 0
    exc_type: str | None = None
    message: str | None = None
    traceback: str | None = None
    out_of_memory: bool = False
    reason: str | None = None
    # Where and when it ended, and the launch-to-entry-point seconds a warm start saves.
    startup_s: float | None = None
    pid: int | None = None
    host: str | None = None
    duration_s: float | None = None
    time_unix: float | None = None

    @property
    def failed(self) -> bool:
        return self.status == "error"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> TrialResult:
        result: TrialResult = from_wire_mapping(cls, data, "the trial result", ResultError)
        return result

    def write(self, path: str | os.PathLike[str]) -> None:
        write_json_atomic(path, self.to_json())


def read_result(path: str | os.PathLike[str]) -> TrialResult | None:
    """The result at ``path``; ``None`` when there is none (the process died before writing it:
    results are written atomically). :class:`ResultError` when the file is not a result."""
    data = read_json(path)
    if data is None:
        return None
    return TrialResult.from_json(data)


__all__ = ["ResultError", "Status", "TrialResult", "read_result"]
