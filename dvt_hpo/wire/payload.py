"""The trial payload: what the orchestrator hands a trial process, as one typed JSON file.

Written by :mod:`dvt_hpo.study.trial_run`, read by :mod:`dvt_hpo.trial.main` (docs/protocol.md). The
values were validated when the study file was loaded (:mod:`dvt_hpo.studyfile`): the reader checks
only the shape (version, keys, JSON types), so a payload written by hand or by another
version fails with one clear line instead of deep inside training.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dvt_hpo.atomic import write_json_atomic
from dvt_hpo.batch.spec import BatchSizeSpec
from dvt_hpo.config.schema import from_wire_mapping
from dvt_hpo.devices.gpu_share import GpuShare
from dvt_hpo.devices.slots import Devices
from dvt_hpo.wire.protocol import PROTOCOL_VERSION


class PayloadError(ValueError):
    """The payload file is missing, not JSON, or does not follow docs/protocol.md."""


@dataclass(frozen=True)
class TrialLimits:
    report_timeout_s: float | None = 60.0  # longest wait for a pruning decision
    timeout_s: float | None = None  # the orchestrator stops the trial after this
    memory_limit: int | None = None  # bytes of address space per process (also in the env)


@dataclass(frozen=True)
class CommandPayload:
    """A ``trainer.command`` trial: the script the trial process runs (:mod:`dvt_hpo.command.script`)."""

    argv: tuple[str, ...]  # with {placeholders}, rendered by the trial process
    metrics_pattern: str | None = None
    names: dict[str, str] = field(default_factory=dict)  # search dimension name -> its path
    stop_grace_s: float = 10.0  # SIGTERM -> SIGKILL when the trial process stops the script


@dataclass(frozen=True)
class ResumePayload:
    """``trials.resume``: where this trial keeps its resume state (:mod:`dvt_hpo.trial.resume_state`)."""

    dir: str  # the trainer's folder (the attempt chain's, under trials.runs_dir)
    fingerprint: str  # params + trainer config + search space: a state of another is not loaded
    every_s: float = 60.0  # at most one save per this many seconds
    attempt: int = 0  # this trial's number (the state records which attempt wrote it)
    expect: bool = False  # the orchestrator found a state of this chain to continue from
    pause: bool = False  # trials.pause: a stop may be a pause, so save the state when pruned


@dataclass(frozen=True)
class TrialPayload:
    entrypoint: str  # "module:function"
    config: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)
    study_name: str | None = None
    trial_number: int | None = None
    batch_size: BatchSizeSpec | None = None
    cache_key: str | None = None  # the study cache's key for this trial's memory footprint
    devices: Devices = "auto"  # trials.devices, canonical
    gpus: tuple[str, ...] = ()  # this trial's slot: its CUDA_VISIBLE_DEVICES entries
    # trials.per_gpu > 1: the slot is a share of its GPU, capped before the trainer allocates.
    gpu_share: GpuShare | None = None
    limits: TrialLimits = TrialLimits()
    trial_dir: str | None = None
    # The study file's folder: trials import the entry point from it first and run in it, so
    # a payload rerun by hand from elsewhere finds the trainer and its relative paths.
    study_dir: str | None = None
    command: CommandPayload | None = None
    protocol: int = PROTOCOL_VERSION
    resume: ResumePayload | None = None  # absent from the file when trials.resume is off

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if self.batch_size is not None:
            data["batch_size"]["memory_keys"] = list(self.batch_size.memory_keys)
        data["devices"] = list(self.devices) if isinstance(self.devices, tuple) else self.devices
        data["gpus"] = list(self.gpus)
        if self.command is not None:
            data["command"]["argv"] = list(self.command.argv)
        if self.resume is None:
            del data["resume"]  # trials.resume off: the file stays as it always was
        return data

    def write(self, path: str | os.PathLike[str]) -> None:
        write_json_atomic(path, self.to_json())

    @classmethod
    def from_json(cls, data: Any) -> TrialPayload:
        if not isinstance(data, Mapping):
            raise PayloadError(f"the payload must be a JSON object, got {type(data).__name__}")
        version = data.get("protocol")
        if version != PROTOCOL_VERSION:
            raise PayloadError(
                f"payload protocol must be {PROTOCOL_VERSION} (this dvt-hpo), got {version!r}"
            )
        payload: TrialPayload = from_wire_mapping(cls, data, "payload", PayloadError)
        entrypoint = payload.entrypoint
        if entrypoint.count(":") != 1 or not all(entrypoint.split(":")):
            raise PayloadError(f"payload entrypoint must be 'module:function', got {entrypoint!r}")
        if payload.command is not None and not payload.command.argv:
            raise PayloadError("payload command.argv must not be empty")
        if not _is_devices(payload.devices):
            raise PayloadError(
                "payload devices must be 'auto', 'cpu', 'cuda', an int or a list of ints, "
                f"got {payload.devices!r}"
            )
        return payload

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> TrialPayload:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise PayloadError(f"cannot read the payload {os.fspath(path)!r}: {exc}") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise PayloadError(f"the payload {os.fspath(path)!r} is not JSON: {exc}") from None
        return cls.from_json(data)


def _is_devices(value: Any) -> bool:
    if value in ("auto", "cpu", "cuda"):
        return True
    if isinstance(value, tuple):
        return bool(value) and all(_is_int(v) and v >= 0 for v in value)
    return _is_int(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


__all__ = ["CommandPayload", "PayloadError", "ResumePayload", "TrialLimits", "TrialPayload"]
