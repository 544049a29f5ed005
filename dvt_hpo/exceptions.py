"""Exceptions shared by the orchestrator and the trial process (imports nothing heavy)."""

from __future__ import annotations

from pathlib import Path


class DvtHpoError(Exception):
    """Base class of dvt-hpo's own errors."""


class SpecError(DvtHpoError):
    """Bad input in a study file, a trainer config or a ``--set`` override (exit code 2).

    The message always names where the problem is (file and line when known, then the field)
    and states the rule with the offending value.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.file = str(file) if file is not None else None
        self.line = line
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
        if self.field:
            where = f"{where}: {self.field}" if where else self.field
        return f"{where}: {self.message}" if where else self.message


class TrialPruned(DvtHpoError):
    """Raised by ``ctx.report`` in the trial process when the study decided to prune it."""

    def __init__(self, step: int) -> None:
        self.step = step
        super().__init__(f"trial pruned at step {step}")


class BatchSizeError(DvtHpoError):
    """The batch-size search could not find any size that fits (e.g. ``low`` does not fit)."""


class CommandFailed(DvtHpoError):
    """A ``trainer.command`` script failed: its message is the trial's whole reason
    (``command exited with 3: ValueError: bad``), recorded without the exception's type."""

    def __init__(self, reason: str, *, out_of_memory: bool = False) -> None:
        super().__init__(reason)
        self.out_of_memory = out_of_memory
