"""study.yaml -> typed, validated :class:`StudySpec`.

CONTRACT (the runner and the CLI rely on these names; extend, do not rename).
Parsing/validation is implemented below the dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal


@dataclass(frozen=True)
class SamplerSpec:
    kind: str = "tpe"  # tpe | random | cmaes | qmc | gp | grid | nsga2
    kwargs: dict[str, Any] = field(default_factory=dict)  # passed to the Optuna class (seed, ...)


@dataclass(frozen=True)
class PrunerSpec:
    kind: str = "median"  # median | percentile | successive_halving | hyperband | threshold | wilcoxon | none
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StudySection:
    name: str
    storage: str  # resolved URL (relative sqlite/journal paths made absolute against the file)
    n_trials: int | None = None  # total for the study, across workers and resumes
    timeout_s: float | None = None  # for this invocation
    sampler: SamplerSpec = field(default_factory=SamplerSpec)
    pruner: PrunerSpec = field(default_factory=PrunerSpec)
    max_failures: int | float | None = None  # count (int >= 1) or ratio (0 < float < 1)
    heartbeat_interval_s: int = 10
    grace_period_s: int | None = None  # default: 2 * heartbeat_interval_s


@dataclass(frozen=True)
class ObjectiveSpec:
    metric: str = "loss"
    direction: Literal["minimize", "maximize"] = "minimize"
    reduce: Literal["best", "last"] = "best"


@dataclass(frozen=True)
class TrialsSpec:
    launcher: Literal["process", "torchrun"] = "process"
    nproc_per_node: int = 1
    parallel: int = 1
    devices: Any = "auto"  # auto | cpu | int | [0, 1] | "0,1" | "cuda:0,1" | "cuda:2"
    timeout_s: float | None = None
    stop_grace_s: float = 10.0
    max_retries: int = 1
    memory_limit: int | None = None  # bytes (parsed from "4GiB", "512MB", ints)
    report_timeout_s: float = 60.0  # bounded wait in ctx.report for the orchestrator's decision
    runs_dir: Path | None = None  # resolved; default <study file folder>/runs/<study name>


@dataclass(frozen=True)
class BatchSizeSpec:
    auto: bool = False
    path: str = "data.batch_size"
    min: int = 1
    max: int = 1024
    start: int | None = None  # default: min
    multiple_of: int = 1
    tolerance: float = 0.02
    effective: int | None = None
    accumulate_path: str = "precision.accumulate_steps"
    memory_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrainerSpec:
    entrypoint: str = "dvt_hpo.train:run"
    config: dict[str, Any] = field(default_factory=dict)  # normalized full config (defaults filled)
    config_file: Path | None = None
    schema: str | None = None  # "module:DataclassType"; default TrainerConfig for the built-in


@dataclass(frozen=True)
class Condition:
    """``when:`` of a dimension: every named earlier dimension has one of the listed values."""

    equals: dict[str, tuple[Any, ...]]


@dataclass(frozen=True)
class Dimension:
    name: str
    kind: Literal["float", "int", "categorical", "bool"]
    path: str
    low: float | int | None = None
    high: float | int | None = None
    step: float | int | None = None
    log: bool = False
    choices: tuple[Any, ...] | None = None
    when: Condition | None = None


@dataclass(frozen=True)
class MlflowSpec:
    tracking_uri: str | None = None
    experiment: str | None = None


@dataclass(frozen=True)
class TrackingSpec:
    mlflow: MlflowSpec | None = None


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
