"""Every exception a user of dvt-hpo can meet, in one place (imports nothing heavy: the trial
process imports it too).

Bad input is :class:`SpecError` (exit 2); a study that cannot go on is :class:`StudyStopped` or
:class:`StorageError` (exit 1). In the trial process, :class:`TrialPruned` and
:class:`TrialStopped` end an entry point; :class:`BatchSizeError`, :class:`CommandFailed` and
:class:`GpuShareError` are a trial's recorded reason.
"""

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


class StudyStopped(DvtHpoError):
    """The study stopped itself (e.g. ``study.max_failures`` reached): exit code 1."""


class TrialStopped(BaseException):
    """Raised in the trial process by SIGTERM (the orchestrator, torchrun or a user stopping
    it), so that the entry point's ``finally`` blocks run before it exits.

    Like ``KeyboardInterrupt`` it derives from ``BaseException``: an ``except Exception`` in
    a training loop must not swallow a stop.
    """

    def __init__(self, signal_name: str = "SIGTERM") -> None:
        self.signal_name = signal_name
        super().__init__(f"trial stopped by {signal_name}")


class GpuShareError(RuntimeError):
    """The share leaves a trial no memory on this GPU (too many trials for its size)."""


class StorageError(DvtHpoError):
    """The study database cannot be opened or used (exit code 1).

    ``str()`` is one line: ``[file: ]study.storage 'redacted-url': problem; hint``.
    """

    def __init__(
        self,
        problem: str,
        *,
        url: str,
        hint: str = "",
        source: str | Path | None = None,
    ) -> None:
        # Imported here: `import dvt_hpo.report` (a script's helper) stays this light.
        from dvt_hpo.text.redact import redact_text, redact_url

        self.problem = one_line(redact_text(problem, url))
        self.hint = hint
        self.redacted_url = redact_url(url)
        self.source = str(source) if source is not None else None
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        hint = f"; {self.hint}" if self.hint else ""
        return f"{where}study.storage {self.redacted_url!r}: {self.problem}{hint}"


class StudyNotFoundError(StorageError):
    """A read-only command found no database, or no study of that name in it."""


def one_line(text: str) -> str:
    """The first non-blank line of ``text``, without its final period."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first.rstrip(".")
