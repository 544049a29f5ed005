"""A trial's folders, one class each: the names of what the orchestrator and the trial process
write there, in one place.

- :class:`TrialDir`, ``<trials.runs_dir>/trial-NNNN``: the payload the orchestrator writes, the
  logs of the trial process, the result the chief writes (``error-rank{R}.json`` from another
  rank that failed), and the trainer's ``output`` folder;
- :class:`ResumeDir`, ``<trials.runs_dir>/resume/trial-NNNN`` (NNNN: the first attempt of a retry
  chain): ``chain.json`` and ``curve.json`` (the orchestrator's) and the ``state`` folder the
  trial process saves in (``state.pt`` and ``saved.json``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["RESUME_FOLDER", "SAVED_FILE", "STATE_FILE", "ResumeDir", "TrialDir"]

RESUME_FOLDER = "resume"
STATE_FILE = "state.pt"  # in a resume state folder: the trainer's state (torch.save)
SAVED_FILE = "saved.json"  # in a resume state folder: the step and size, read without torch


def _numbered(number: int) -> str:
    return f"trial-{number:04d}"


@dataclass(frozen=True)
class TrialDir:
    """One trial's folder."""

    path: Path

    @classmethod
    def of(cls, runs_dir: Path, number: int) -> TrialDir:
        return cls(Path(runs_dir) / _numbered(number))

    @property
    def payload(self) -> Path:
        return self.path / "payload.json"

    @property
    def result(self) -> Path:
        return self.path / "result.json"

    def rank_error(self, rank: int) -> Path:
        return self.path / f"error-rank{rank}.json"

    def rank_errors(self) -> list[Path]:
        """The error files of the ranks that failed, in order."""
        return sorted(self.path.glob("error-rank*.json"))

    @property
    def stdout(self) -> Path:
        return self.path / "stdout.log"

    @property
    def stderr(self) -> Path:
        return self.path / "stderr.log"

    @property
    def output(self) -> Path:
        """The trainer's ``output_dir`` (checkpointing off: what it writes besides)."""
        return self.path / "output"


@dataclass(frozen=True)
class ResumeDir:
    """The resume folder of one retry chain (``trials.resume``)."""

    path: Path

    @staticmethod
    def root(runs_dir: Path) -> Path:
        """Where every chain's folder is."""
        return Path(runs_dir) / RESUME_FOLDER

    @classmethod
    def of(cls, runs_dir: Path, first_attempt: int) -> ResumeDir:
        return cls(cls.root(runs_dir) / _numbered(first_attempt))

    @property
    def chain(self) -> Path:
        return self.path / "chain.json"

    @property
    def curve(self) -> Path:
        return self.path / "curve.json"

    @property
    def state(self) -> Path:
        return self.path / "state"

    @property
    def saved(self) -> Path:
        return self.state / SAVED_FILE
