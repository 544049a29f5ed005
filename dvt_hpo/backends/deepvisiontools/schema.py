"""The config shape of the deepvisiontools backend, as pure dataclasses (stdlib only).

``trainer.schema: dvt_hpo.backends.deepvisiontools:BackendConfig`` lets ``dvt-hpo validate``
check search paths, batch-size paths and values against deepvisiontools' ``TrainerConfig``
without importing deepvisiontools or torch: the orchestrator may not even have them installed.

The top level is the ``trainer:`` block of deepvisiontools' ``TrainerConfig.from_yaml`` format
(the fields of its portable export, with the same names and defaults, so the paths are the ones
its own ``SearchSpaceSpec.path`` uses: ``optim.optim_args.lr``), plus two sections of ours:

- ``data``: the datasets and the loader's batch size (``data.batch_size`` is the default
  ``batch_size.path``);
- ``settings``: deepvisiontools' global config (``set_current(current().update_...)``).

``tests/backends/test_schema_mirror.py`` compares these fields with deepvisiontools' own
dataclasses, so a release that adds or renames a field fails the test instead of drifting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from dvt_hpo.exceptions import SpecError

Task = Literal["semantic_mask", "instance_mask", "bbox"]


@dataclass
class ImportSection:
    """``{target: "torch.optim.AdamW", kwargs: {...}}``: an importable class and its kwargs."""

    target: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.target.strip():
            raise SpecError(
                "must name an importable class, e.g. 'torch.optim.AdamW'", field="target"
            )


@dataclass
class ModelSpecSection:
    """A registered builder (``MODEL_REGISTRY``) and its YAML-safe kwargs."""

    builder: str
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class DevicesSection:
    device: str | None = None
    strategy: Literal["auto", "ddp", "single"] = "auto"
    num_workers: int | None = None
    pin_memory: bool | None = None
    ddp_timeout_seconds: float | None = None


@dataclass
class OptimSection:
    optimizer: ImportSection
    optim_args: dict[str, Any] = field(default_factory=dict)
    param_groups: str = "flat"
    weight_decay: float | None = None
    layer_decay: float | None = None


@dataclass
class WarmupSection:
    kind: Literal["linear", "constant"] = "linear"
    steps: int | None = None
    epochs: float | None = None
    steps_unit: Literal["step", "epoch"] = "step"
    ratio: float = 1.0
    start_factor: float = 0.001


@dataclass
class SchedSection:
    scheduler: ImportSection | None = None
    scheduler_args: dict[str, Any] = field(default_factory=dict)
    step_on: Literal["epoch", "step", "batch"] = "epoch"
    warmup: WarmupSection | None = None


@dataclass
class PrecisionSection:
    amp: bool | None = None
    amp_dtype: Literal["fp16", "bf16", "fp32"] = "bf16"
    grad_clip: float | None = None
    accumulate_steps: int = 1

    def __post_init__(self) -> None:
        if self.accumulate_steps < 1:
            raise SpecError(f"must be >= 1, got {self.accumulate_steps}", field="accumulate_steps")


@dataclass
class EmaSection:
    enabled: bool = True
    decay: float = 0.995
    update_every: int = 1
    warmup_steps: int = 0
    eval_with_ema: bool = True


@dataclass
class FreezingSection:
    freeze_epochs: int = 0
    backbone_group_name: str = "backbone"
    freeze_backbone: bool = False
    freeze_bn: bool = False


@dataclass
class NormalizationSection:
    policy: Literal["auto", "none", "freeze_bn", "sync_bn", "sync_or_freeze_bn"] = "auto"
    freeze_affine: bool = True
    freeze_running_stats: bool = True
    verbose: bool = True


@dataclass
class CheckpointSection:
    """Forced off in every trial (``enable_checkpointing``, periodic saves, model export);
    kept so that ``dvt-hpo best --export`` writes a config that trains with it back on."""

    output_dir: str | None = None
    enable_checkpointing: bool = True
    monitor: list[str] = field(default_factory=lambda: ["valid/loss", "loss"])
    mode: Literal["min", "max"] = "min"
    filename: str = "checkpoint"
    save_every_n_epochs: int = 1
    keep_last_n: int = 3
    export_model_artifact: bool = False
    export_when: Literal["best", "all"] = "best"
    model_builder: str | None = None
    model_kwargs: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if len(self.monitor) != 2:
            raise SpecError(
                f"must be [metric name, metric type], e.g. ['valid/loss', 'loss'], got "
                f"{self.monitor!r}",
                field="monitor",
            )


@dataclass
class LoggingSection:
    """MLflow and TensorBoard output is redirected into the trial's folder (see docs/tutorials/deepvisiontools.md)."""

    backends: str | list[str] = "mlflow"
    tensorboard: dict[str, Any] = field(default_factory=dict)
    mlflow: dict[str, Any] = field(default_factory=dict)
    log_every_n_steps: int = 0
    mlflow_experiment_name: str | None = None
    mlflow_run_name: str | None = None
    wandb_project: str | None = None
    wandb_run_name: str | None = None


@dataclass
class MetricsSection:
    kind: str | None = None
    num_classes: int | None = None
    target: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class EvalSection:
    eval_every_n_steps: int = 0
    eval_on: Literal["valid", "train", "valid_and_train"] = "valid"
    metrics: MetricsSection | None = None


@dataclass
class DataSection:
    """The datasets (``DeepVisionDataset(root, kind)``) and the loaders' batch size.

    Relative roots resolve against the trial's working directory: the study file's folder.
    """

    train: str
    valid: str | None = None
    kind: str = "semantic_mask_folder"
    batch_size: int = 4
    valid_batch_size: int | None = None  # None: the (found) training batch size

    def __post_init__(self) -> None:
        for name in ("batch_size", "valid_batch_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise SpecError(f"must be >= 1, got {value}", field=name)


@dataclass
class SettingsSection:
    """deepvisiontools' global config for the trial: ``current().update_<task>(num_classes=...)
    .update_device(device).update_amp(amp)``, and the seed of torch's generators."""

    num_classes: int
    task: Task = "semantic_mask"
    device: str = "auto"  # cuda when the trial's slot has a GPU, else cpu
    amp: bool = False
    seed: int | None = 0

    def __post_init__(self) -> None:
        if self.num_classes < 1:
            raise SpecError(
                f"must be >= 1 (classes without the background), got {self.num_classes}",
                field="num_classes",
            )


@dataclass
class BackendConfig:
    """``trainer.config`` of the deepvisiontools backend (see the module docstring)."""

    model_spec: ModelSpecSection
    optim: OptimSection
    data: DataSection
    settings: SettingsSection
    epochs: int = 100
    output_dir: str | None = None  # replaced by the trial's folder
    find_unused_parameters: bool = False
    devices: DevicesSection = field(default_factory=DevicesSection)
    sched: SchedSection = field(default_factory=SchedSection)
    precision: PrecisionSection = field(default_factory=PrecisionSection)
    ema: EmaSection = field(default_factory=EmaSection)
    freezing: FreezingSection = field(default_factory=FreezingSection)
    normalization: NormalizationSection = field(default_factory=NormalizationSection)
    checkpoint: CheckpointSection = field(default_factory=CheckpointSection)
    logging: LoggingSection = field(default_factory=LoggingSection)
    eval: EvalSection = field(default_factory=EvalSection)
    optuna: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise SpecError(f"must be >= 1, got {self.epochs}", field="epochs")
        if self.optuna is not None:
            # Two optimizers of one config would disagree on what a trial is.
            raise SpecError(
                "deepvisiontools' own Optuna block is not used by dvt-hpo: move its "
                "search_space entries to the study's search_space (same paths), its sampler "
                "and pruner to study.sampler / study.pruner, and set optuna: null",
                field="optuna",
            )


# The sections of deepvisiontools' TrainerConfig that this schema mirrors, by field name; the
# mirror test reads it (model/train_loader/valid_loader are runtime objects, never YAML).
MIRRORED = {
    "TrainerConfig": BackendConfig,
    "DevicesConfig": DevicesSection,
    "OptimConfig": OptimSection,
    "SchedConfig": SchedSection,
    "WarmupConfig": WarmupSection,
    "PrecisionConfig": PrecisionSection,
    "EMAConfig": EmaSection,
    "FreezingConfig": FreezingSection,
    "NormalizationConfig": NormalizationSection,
    "CheckpointConfig": CheckpointSection,
    "LoggingConfig": LoggingSection,
    "EvalConfig": EvalSection,
    "MetricsSpec": MetricsSection,
}
OURS = ("data", "settings")  # BackendConfig sections that are not TrainerConfig fields
RUNTIME_ONLY = ("model", "train_loader", "valid_loader")  # TrainerConfig fields never in YAML

__all__ = ["BackendConfig", "DataSection", "MIRRORED", "SettingsSection"]
