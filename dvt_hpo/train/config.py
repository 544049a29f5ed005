"""The built-in trainer's configuration: a tree of dataclasses, portable as YAML or JSON.

Pure (stdlib; PyYAML when a file is read or written): the orchestrator imports it to validate
trainer configs and search paths without importing torch. Names follow deepvisiontools' ``TrainerConfig`` where they fit.
Optimizers and schedulers are named by importable targets (``"torch.optim.AdamW"``) with plain
keyword arguments, so a config is portable; objects are rejected.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dvt_hpo.atomic import write_text_atomic
from dvt_hpo.config.paths import set_path
from dvt_hpo.config.schema import field_type_at, from_mapping, to_plain, value_fits_type
from dvt_hpo.exceptions import SpecError

__all__ = [
    "BUILTIN_MODELS",
    "CheckpointConfig",
    "DataConfig",
    "DevicesConfig",
    "EmaConfig",
    "EvalConfig",
    "LatencyConfig",
    "ModelConfig",
    "OptimConfig",
    "PrecisionConfig",
    "SchedConfig",
    "SyntheticConfig",
    "TrainerConfig",
    "WarmupConfig",
    "apply_overrides",
    "dump_trainer_config",
    "field_type_at",
    "import_target",
    "load_trainer_config",
    "value_fits_type",
]

# "package.module.Name" or "package.module:Name"
_TARGET_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*[.:][A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
# The builders dvt_hpo.train.models registers (kept equal by a test), named here so that the
# orchestrator checks model.builder without importing torch.
BUILTIN_MODELS = ("cnn", "mlp")


def _require(ok: bool, field_name: str, message: str) -> None:
    if not ok:
        raise SpecError(message, field=field_name)


def _check_target(value: str, field_name: str) -> None:
    _require(
        bool(_TARGET_RE.match(value)),
        field_name,
        f"expected an importable target such as 'torch.optim.AdamW' or 'package.module:Name', "
        f"got {value!r}",
    )


def import_target(target: str, field: str) -> Any:
    """``"package.module.Name"`` or ``"package.module:Name"`` -> the object (imported on call)."""
    if ":" in target:
        module_name, _, attr = target.partition(":")
    else:
        module_name, _, attr = target.rpartition(".")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise SpecError(f"cannot import {target!r}: {exc}", field=field) from None
    return obj


@dataclass(frozen=True)
class ModelConfig:
    """A registered model builder (``mlp``, ``cnn`` or one added with ``register_model``)."""

    builder: str = "cnn"
    kwargs: dict[str, Any] = field(default_factory=dict)  # e.g. width, depth, dropout

    def __post_init__(self) -> None:
        _require(bool(self.builder), "builder", "expected a non-empty builder name, got ''")


@dataclass(frozen=True)
class SyntheticConfig:
    """Seeded random images whose labels are learnable (class-dependent mean)."""

    num_samples: int = 1024
    num_classes: int = 10
    channels: int = 3
    noise: float = 1.0  # the noise's standard deviation; the patterns' is 1 (higher: harder)

    def __post_init__(self) -> None:
        _require(self.noise >= 0, "noise", f"expected >= 0, got {self.noise}")
        _require(self.num_samples >= 2, "num_samples", f"expected >= 2, got {self.num_samples}")
        _require(self.num_classes >= 2, "num_classes", f"expected >= 2, got {self.num_classes}")
        _require(self.channels >= 1, "channels", f"expected >= 1, got {self.channels}")


@dataclass(frozen=True)
class DataConfig:
    kind: Literal["digits", "imagefolder", "synthetic"] = "digits"
    root: str | None = None  # imagefolder: one sub-folder per class
    val_root: str | None = None  # imagefolder: a separate validation folder (else split)
    val_fraction: float = 0.2
    batch_size: int = 64  # per process (per rank under DDP)
    num_workers: int = 0
    # Side of the square images fed to the model: imagefolder/synthetic default 32, digits are
    # 8x8 and are resized only when this is set (handy to make a memory-hungry digits model).
    image_size: int | None = None
    max_samples: int | None = None  # cap on the dataset before the split, for speed
    # imagefolder: images that cannot be opened fail the data load (listed) unless skipped.
    skip_unreadable: bool = False
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)

    def __post_init__(self) -> None:
        _require(
            0.0 < self.val_fraction < 1.0,
            "val_fraction",
            f"expected 0 < val_fraction < 1, got {self.val_fraction}",
        )
        _require(self.batch_size >= 1, "batch_size", f"expected >= 1, got {self.batch_size}")
        _require(self.num_workers >= 0, "num_workers", f"expected >= 0, got {self.num_workers}")
        if self.image_size is not None:
            _require(self.image_size >= 1, "image_size", f"expected >= 1, got {self.image_size}")
        if self.max_samples is not None:
            _require(self.max_samples >= 2, "max_samples", f"expected >= 2, got {self.max_samples}")
        if self.kind == "imagefolder":
            _require(
                self.root is not None,
                "root",
                "kind 'imagefolder' needs root: a folder with one sub-folder per class",
            )


@dataclass(frozen=True)
class OptimConfig:
    target: str = "torch.optim.AdamW"
    optim_args: dict[str, Any] = field(default_factory=lambda: {"lr": 1e-3})
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        _check_target(self.target, "target")
        _require(
            "weight_decay" not in self.optim_args,
            "optim_args.weight_decay",
            "set optim.weight_decay instead of optim.optim_args.weight_decay",
        )
        _require(self.weight_decay >= 0, "weight_decay", f"expected >= 0, got {self.weight_decay}")


@dataclass(frozen=True)
class WarmupConfig:
    """Linear warm-up from ``start_factor`` x lr to lr, over ``steps`` or ``epochs`` (one)."""

    steps: int | None = None
    epochs: int | None = None
    start_factor: float = 0.1

    def __post_init__(self) -> None:
        _require(
            (self.steps is None) != (self.epochs is None),
            "steps",
            f"set exactly one of steps and epochs, got steps={self.steps}, epochs={self.epochs}",
        )
        if self.steps is not None:
            _require(self.steps >= 1, "steps", f"expected >= 1, got {self.steps}")
        if self.epochs is not None:
            _require(self.epochs >= 1, "epochs", f"expected >= 1, got {self.epochs}")
        _require(
            0.0 < self.start_factor <= 1.0,
            "start_factor",
            f"expected 0 < start_factor <= 1, got {self.start_factor}",
        )


@dataclass(frozen=True)
class SchedConfig:
    target: str = "torch.optim.lr_scheduler.CosineAnnealingLR"
    sched_args: dict[str, Any] = field(default_factory=dict)
    step_on: Literal["epoch", "step"] = "epoch"
    warmup: WarmupConfig | None = None

    def __post_init__(self) -> None:
        _check_target(self.target, "target")


@dataclass(frozen=True)
class PrecisionConfig:
    amp: bool = False
    amp_dtype: Literal["fp16", "bf16", "fp32"] = "bf16"
    grad_clip: float | None = None  # max global gradient norm
    accumulate_steps: int = 1

    def __post_init__(self) -> None:
        if self.grad_clip is not None:
            _require(self.grad_clip > 0, "grad_clip", f"expected > 0, got {self.grad_clip}")
        _require(
            self.accumulate_steps >= 1,
            "accumulate_steps",
            f"expected >= 1, got {self.accumulate_steps}",
        )


@dataclass(frozen=True)
class EmaConfig:
    enabled: bool = False
    decay: float = 0.999
    update_every: int = 1  # optimizer steps between EMA updates
    warmup_steps: int = 0  # optimizer steps before the EMA starts averaging (copies until then)
    eval_with_ema: bool = True

    def __post_init__(self) -> None:
        _require(0.0 <= self.decay < 1.0, "decay", f"expected 0 <= decay < 1, got {self.decay}")
        _require(self.update_every >= 1, "update_every", f"expected >= 1, got {self.update_every}")
        _require(self.warmup_steps >= 0, "warmup_steps", f"expected >= 0, got {self.warmup_steps}")


@dataclass(frozen=True)
class CheckpointConfig:
    enable_checkpointing: bool = True  # master switch; HPO trials force it off
    monitor: str = "macro_f1"  # a reported metric: loss, train_loss, accuracy, macro_f1
    mode: Literal["min", "max"] = "max"
    dir: str | None = None  # default: <output_dir>/checkpoints
    save_every_n_epochs: int = 1
    keep_last_n: int = 1

    def __post_init__(self) -> None:
        _require(
            self.save_every_n_epochs >= 1,
            "save_every_n_epochs",
            f"expected >= 1, got {self.save_every_n_epochs}",
        )
        _require(self.keep_last_n >= 1, "keep_last_n", f"expected >= 1, got {self.keep_last_n}")


@dataclass(frozen=True)
class LatencyConfig:
    """Batch-1 inference latency, measured once per run after the first evaluation.

    ``warmup`` untimed forward passes, then the median of ``repeats`` timed ones (see
    :mod:`dvt_hpo.train.measure`).
    """

    enabled: bool = True
    warmup: int = 5
    repeats: int = 20

    def __post_init__(self) -> None:
        _require(self.warmup >= 0, "warmup", f"expected >= 0, got {self.warmup}")
        _require(self.repeats >= 1, "repeats", f"expected >= 1, got {self.repeats}")


@dataclass(frozen=True)
class EvalConfig:
    latency: LatencyConfig = field(default_factory=LatencyConfig)


@dataclass(frozen=True)
class DevicesConfig:
    device: str = "auto"  # auto | cpu | cuda | cuda:N ; under DDP each rank uses cuda:LOCAL_RANK
    strategy: Literal["auto", "single", "ddp"] = "auto"
    pin_memory: bool = False
    # torch's CPU threads (torch.set_num_threads); null: $OMP_NUM_THREADS, else torch's default
    # (every core). A thread count changes the order of float sums, so a trial's value is only
    # reproduced with its own: `dvt-hpo best --export` writes what the trial ran with.
    threads: int | None = None

    def __post_init__(self) -> None:
        _require(
            bool(_DEVICE_RE.match(self.device)),
            "device",
            f"expected 'auto', 'cpu', 'cuda' or 'cuda:N', got {self.device!r}",
        )
        _require(
            self.threads is None or self.threads >= 1,
            "threads",
            f"expected >= 1 or null, got {self.threads}",
        )


@dataclass(frozen=True)
class TrainerConfig:
    epochs: int = 10
    seed: int = 0
    # torch.use_deterministic_algorithms (warn-only) and no cuDNN autotuning: the same numbers
    # run after run on one machine, at some speed.
    deterministic: bool = False
    output_dir: str = "runs/train"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    sched: SchedConfig | None = None
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    ema: EmaConfig = field(default_factory=EmaConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    devices: DevicesConfig = field(default_factory=DevicesConfig)

    def __post_init__(self) -> None:
        _require(self.epochs >= 1, "epochs", f"expected >= 1, got {self.epochs}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> TrainerConfig:
        """Strictly build a config from plain data; missing keys take their defaults.

        Raises :class:`SpecError` naming ``source``, the dotted field, the value and what is
        allowed (unknown keys get a did-you-mean).
        """
        return from_mapping(cls, data, source=source)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/YAML data; ``TrainerConfig.from_dict(c.to_dict()) == c``."""
        return to_plain(self)

    def with_values(self, changes: Mapping[str, Any]) -> TrainerConfig:
        """A copy with dotted paths changed, e.g. ``cfg.with_values({"data.batch_size": 32})``.

        Values are checked as in :meth:`from_dict`.
        """
        data = self.to_dict()
        for path, value in changes.items():
            set_path(data, path, value, create=True)
        return TrainerConfig.from_dict(data)


def load_trainer_config(
    path: str | os.PathLike[str], overrides: Iterable[str] = ()
) -> TrainerConfig:
    """Read a YAML (or JSON) trainer config and apply ``--set PATH=VALUE`` overrides.

    The same YAML loader and override syntax as the study file (``1e-4`` is a float); errors
    name the file and line of the value, or ``<--set>`` for an overridden one, and the field.
    """
    from dvt_hpo.config.source import Doc, read_yaml

    source = str(path)
    doc = Doc(source)
    data = read_yaml(Path(path), source, doc, (), "the trainer config")
    return _build(doc, {} if data is None else data, overrides)


def apply_overrides(cfg: TrainerConfig, overrides: Iterable[str]) -> TrainerConfig:
    """``cfg`` with ``PATH=VALUE`` overrides applied (values read as YAML), then re-checked."""
    from dvt_hpo.config.source import OVERRIDE_SOURCE, Doc

    return _build(Doc(OVERRIDE_SOURCE), cfg.to_dict(), overrides)


def _build(doc: Any, data: Any, overrides: Iterable[str]) -> TrainerConfig:
    from dvt_hpo.config.source import apply_override, parse_override

    examples = "epochs=3 or optim.optim_args.lr=0.01"
    parsed = [parse_override(text, examples) for text in overrides]
    if parsed and not isinstance(data, dict):
        data = {}  # the error below names the file's top level; overrides need a mapping
    for override in parsed:
        apply_override(doc, data, override)
    try:
        return TrainerConfig.from_dict(data)
    except SpecError as exc:
        raise doc.place(exc) from None


def dump_trainer_config(cfg: TrainerConfig, path: str | os.PathLike[str]) -> None:
    """Write ``cfg`` as YAML (keys in declaration order), atomically."""
    import yaml

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(target, yaml.safe_dump(cfg.to_dict(), sort_keys=False))
