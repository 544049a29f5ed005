"""The study file as typed dataclasses: what :func:`dvt_hpo.studyfile.load_spec` returns.

Stdlib only (no optuna, no yaml): the trial process imports :class:`BatchSizeSpec` from here.
Each section is described once: the plain fields carry their type, default and range
(:func:`dvt_hpo.config.schema.rule`) and are checked by the one schema engine; fields marked
:func:`dvt_hpo.config.schema.domain` are checked by the section's code (storage URLs, devices, Optuna
signatures, search paths). After loading, every default is filled in: the runtime never fills
one again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dvt_hpo.config.schema import domain, rule

__all__ = [
    "BUILTIN_ENTRYPOINT",
    "COMMAND_ENTRYPOINT",
    "BatchSizeSpec",
    "ClusterSpec",
    "Condition",
    "ConstraintSpec",
    "Dimension",
    "MetricSpec",
    "MlflowSpec",
    "ObjectiveSpec",
    "PlateauSpec",
    "PrunerSpec",
    "SamplerSpec",
    "StudySection",
    "StudySpec",
    "TrackingSpec",
    "TrainerSpec",
    "TrialsSpec",
]

BUILTIN_ENTRYPOINT = "dvt_hpo.train:run"
# The entry point of a ``trainer.command`` study: it runs the command (dvt_hpo.command.script).
COMMAND_ENTRYPOINT = "dvt_hpo.command:run"


@dataclass(frozen=True)
class SamplerSpec:
    kind: str = "tpe"  # tpe | random | cmaes | qmc | gp | grid | nsga2
    kwargs: dict[str, Any] = field(default_factory=dict)  # passed to the Optuna class (seed, ...)


@dataclass(frozen=True)
class PrunerSpec:
    kind: str = "median"  # median | percentile | successive_halving | hyperband | threshold | wilcoxon | none
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PlateauSpec:
    """``study.plateau``: stop launching once the last ``trials`` finished trials of a run did
    not improve the best value by more than ``min_delta`` (:mod:`dvt_hpo.study.plateau`)."""

    trials: int = rule(ge=1)
    min_delta: float = rule(0.0, ge=0)


@dataclass(frozen=True)
class StudySection:
    name: str = rule(what="a non-empty string")
    # Resolved URL (relative sqlite/journal paths made absolute against the study file's folder).
    storage: str = domain("")
    n_trials: int | None = rule(None, ge=1)  # total for the study, across workers and resumes
    timeout_s: float | None = rule(None, gt=0)  # for this invocation
    # The loader always fills these: the measured defaults live in dvt_hpo.studyfile.defaults.
    sampler: SamplerSpec = domain(default_factory=SamplerSpec)
    pruner: PrunerSpec = domain(default_factory=PrunerSpec)
    # A count (int >= 1) or a share of n_trials (0 < float < 1); the loader rejects a share
    # without n_trials.
    max_failures: int | float | None = domain(None)
    heartbeat_interval_s: int = rule(10, ge=1)
    grace_period_s: int = rule(20, ge=1)  # default: 2 * heartbeat_interval_s
    # How long storage calls of a running study retry while the database is unreachable.
    # Long enough for a server restart or a fail-over before the run gives up.
    storage_retry_s: float = rule(120.0, ge=0)
    plateau: PlateauSpec | None = domain(None)


@dataclass(frozen=True)
class MetricSpec:
    """One objective of ``objective.metrics``."""

    name: str = rule(what="a metric name")
    direction: Literal["minimize", "maximize"] | None = rule(None)  # filled from the name


@dataclass(frozen=True)
class ConstraintSpec:
    """``{metric, max, min}``: feasible when ``min <= value <= max`` (either bound optional)."""

    metric: str = rule(what="a metric name")
    max: float | None = rule(None)
    min: float | None = rule(None)


@dataclass(frozen=True)
class ObjectiveSpec:
    # ``metric``/``direction`` are the first objective's; after loading ``metrics`` always
    # lists every objective (one item for a single-objective study).
    metric: str = rule("loss", what="a metric name")
    direction: Literal["minimize", "maximize"] = rule("minimize")  # default from the metric
    reduce: Literal["best", "last"] = rule("best")
    metrics: tuple[MetricSpec, ...] = domain(())
    constraints: tuple[ConstraintSpec, ...] = domain(())

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.metrics) if self.metrics else (self.metric,)

    @property
    def directions(self) -> tuple[str, ...]:
        if not self.metrics:
            return (self.direction,)
        return tuple(m.direction or self.direction for m in self.metrics)

    @property
    def is_multi(self) -> bool:
        return len(self.names) > 1


@dataclass(frozen=True)
class TrialsSpec:
    launcher: Literal["process", "torchrun"] = rule("process")
    nproc_per_node: int = rule(1, ge=1)
    parallel: int = rule(1, ge=1)  # default with per_gpu > 1: every share (read_trials)
    per_gpu: int = rule(1, ge=1)  # trials packed on each GPU, each with 1/per_gpu of its memory
    # Canonical: "auto", "cpu", "cuda", an int (a GPU count) or a tuple of GPU ids.
    devices: Any = domain("auto")
    timeout_s: float | None = rule(None, gt=0)
    stop_grace_s: float = rule(10.0, ge=0)
    max_retries: int = rule(1, ge=0)
    memory_limit: int | None = domain(None)  # bytes (parsed from "4GiB", "512MB", ints)
    report_timeout_s: float = rule(60.0, gt=0)  # bounded wait in ctx.report for a decision
    runs_dir: Path = domain(Path("runs"))  # resolved; default <study file folder>/runs/<name>
    # Fork each trial from a template that imported the trainer once (launcher process only).
    warm: bool = domain(True)
    preload: tuple[str, ...] = domain(())  # more modules the warm template imports
    log_limit: int | None = domain(10 * 1024**2)  # bytes per stream and trial; None: no cap
    keep_logs: Literal["all", "failed", "none"] = rule("all")  # logs of finished trials


@dataclass(frozen=True)
class BatchSizeSpec:
    auto: bool = rule(False)
    path: str = domain("data.batch_size")
    min: int = rule(1, ge=1)
    max: int = rule(1024, ge=1)  # >= min, checked by the section's code
    start: int | None = rule(None, ge=1)  # default: min
    multiple_of: int = rule(1, ge=1)
    tolerance: float = rule(0.02, gt=0, le=0.5)
    effective: int | None = rule(None, ge=1)
    accumulate_path: str = domain("precision.accumulate_steps")
    memory_keys: tuple[str, ...] = domain(())


@dataclass(frozen=True)
class TrainerSpec:
    entrypoint: str = rule(BUILTIN_ENTRYPOINT, what="an entry point")
    config: dict[str, Any] = domain(
        default_factory=dict
    )  # normalized full config (defaults filled)
    config_file: Path | None = domain(None)
    schema: str | None = rule(None, what="'module:Dataclass'")  # default TrainerConfig (built-in)
    # A training script run as the trainer: argv with {placeholders}; entrypoint is then
    # COMMAND_ENTRYPOINT.
    command: tuple[str, ...] | None = domain(None)
    metrics_pattern: str | None = domain(None)  # a regex over its stdout lines


@dataclass(frozen=True)
class Condition:
    """``when:`` of a dimension: every named earlier dimension has one of the listed values."""

    equals: dict[str, tuple[Any, ...]]


@dataclass(frozen=True)
class Dimension:
    name: str = domain()  # default: the path
    kind: Literal["float", "int", "categorical", "bool"] = rule()
    path: str = domain()
    low: float | int | None = domain(None)
    high: float | int | None = domain(None)
    step: float | int | None = domain(None)
    log: bool = rule(False)
    choices: tuple[Any, ...] | None = domain(None)
    when: Condition | None = domain(None)


@dataclass(frozen=True)
class MlflowSpec:
    tracking_uri: str | None = rule(None, what="a URI or folder")
    experiment: str | None = rule(None)


@dataclass(frozen=True)
class TrackingSpec:
    mlflow: MlflowSpec | None = domain(None)


@dataclass(frozen=True)
class ClusterSpec:
    """Section ``cluster``: how ``dvt-hpo submit`` starts the study's workers on a scheduler."""

    kind: Literal["slurm"] = rule("slurm")
    workers: int = rule(1, ge=1)  # array tasks, each one ``dvt-hpo run`` (an orchestrator)
    partition: str | None = rule(None, what="a partition name")
    time_limit: int = domain(60)  # minutes (written as minutes or Slurm's "D-HH:MM:SS")
    cpus_per_worker: int | None = rule(None, ge=1)  # None: Slurm's default
    gpus_per_worker: int = rule(0, ge=0)  # they become the worker's trials.devices
    memory_per_worker: int | None = domain(None)  # bytes (from "16GiB"); None: Slurm's default
    sbatch: dict[str, Any] = domain(default_factory=dict)  # more sbatch options (account, qos)
    setup: tuple[str, ...] = domain(())  # shell lines run before the worker
    requeue: bool = rule(False)  # a preempted worker goes back to the queue
    logs: Path = domain(Path("runs/slurm"))  # resolved; default <trials.runs_dir>/slurm
    job_name: str | None = rule(None, what="a job name")  # default dvt-hpo-<study name>
    # SQLite or journal files on a cluster: refused for several workers unless set.
    allow_file_storage: bool = rule(False)


@dataclass(frozen=True)
class StudySpec:
    path: Path  # the study file (absolute)
    study: StudySection
    objective: ObjectiveSpec
    trials: TrialsSpec
    batch_size: BatchSizeSpec
    trainer: TrainerSpec
    search_space: tuple[Dimension, ...]
    tracking: TrackingSpec = field(default_factory=TrackingSpec)
    cluster: ClusterSpec | None = None  # None: no ``cluster`` section
    # Where each field was written: {"objective.metric": (file, line)}, so a check that runs
    # after loading (the stored study's comparison) can still name the line.
    locations: dict[str, tuple[str, int | None]] = field(
        default_factory=dict, compare=False, repr=False
    )
    # The --set overrides it was loaded with, so that a printed follow-up command (retry,
    # dashboard) names the same study. Never stored (a value may hold a password).
    overrides: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def locate(self, dotted: str) -> tuple[str, int | None]:
        """The file and line of ``dotted`` (or of its nearest written ancestor)."""
        key = dotted
        while key not in self.locations:
            if not key:
                return (str(self.path), None)
            key = re.sub(r"(?:^|\.)[^.\[\]]*$|\[\d+\]$", "", key)
        return self.locations[key]
