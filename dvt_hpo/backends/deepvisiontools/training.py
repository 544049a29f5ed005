"""The trial side of the deepvisiontools backend: one training with deepvisiontools' Trainer.

Imported by :func:`dvt_hpo.backends.deepvisiontools.run` only, in the trial process, after
the environment was redirected into the trial's folder (importing deepvisiontools creates
ultralytics' settings file under ``$HOME``).
"""

from __future__ import annotations

import copy
import logging
import math
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import yaml
from deepvisiontools.config import current, set_current
from deepvisiontools.datasets import DeepVisionDataset, DeepVisionLoader
from deepvisiontools.train import Trainer, TrainerConfig
from deepvisiontools.train.hooks import Hook, HookList, MetricsHook
from deepvisiontools.train.trainer import _resolve_requested_device, _unwrap

from dvt_hpo.backends.deepvisiontools import resume as resume_state
from dvt_hpo.backends.deepvisiontools.isolation import TrialFolders, output_overrides
from dvt_hpo.backends.deepvisiontools.probe import make_fits
from dvt_hpo.backends.deepvisiontools.schema import BackendConfig, DataSection
from dvt_hpo.backends.deepvisiontools.scoring import epoch_metrics
from dvt_hpo.exceptions import TrialPruned
from dvt_hpo.trial.context import distributed_env

log = logging.getLogger(__name__)

# Where the backend applies the batch size the search finds (data.batch_size) and the
# accumulation that reaches batch_size.effective.
BATCH_SIZE_PATH = "data.batch_size"
ACCUMULATE_PATH = "precision.accumulate_steps"

_UPDATE_TASK = {
    "semantic_mask": "update_semantic_mask",
    "instance_mask": "update_instance_mask",
    "bbox": "update_bbox",
}


def trainer_block(
    config: Mapping[str, Any], spec: BackendConfig, folders: TrialFolders
) -> dict[str, Any]:
    """The ``trainer:`` block deepvisiontools' ``from_yaml`` reads, with this trial's rules:
    checkpointing and model export off, outputs in the trial's folder, metrics on."""
    block = {k: copy.deepcopy(v) for k, v in config.items() if k not in ("data", "settings")}
    checkpoint = block.setdefault("checkpoint", {})
    checkpoint["enable_checkpointing"] = False
    checkpoint["save_every_n_epochs"] = 0
    checkpoint["export_model_artifact"] = False
    output_overrides(block, folders, os.environ)
    evaluation = block.setdefault("eval", {})
    if evaluation.get("metrics") is None:
        # macro_f1 needs the confusion matrix of the library's metric suite.
        evaluation["metrics"] = {"kind": spec.settings.task, "num_classes": None}
    block["optuna"] = None
    return block


def load_config(block: Mapping[str, Any], train_loader: Any, valid_loader: Any) -> Any:
    """A ``TrainerConfig`` through deepvisiontools' own ``from_yaml``; it builds the model from
    ``model_spec`` now, after the trial's values were written into the block."""
    text = yaml.safe_dump({"trainer": dict(block)}, sort_keys=False)
    cfg = TrainerConfig.from_yaml(text, train_loader=train_loader, valid_loader=valid_loader)
    cfg.checkpoint.monitor = tuple(cfg.checkpoint.monitor)
    return cfg


def apply_settings(spec: BackendConfig) -> str:
    """Set deepvisiontools' global config for this process; returns the resolved device."""
    settings = spec.settings
    device = settings.device.strip().lower()
    if device in ("auto", "gpu"):
        device = "cuda" if torch.cuda.is_available() else "cpu"
    updated = getattr(current(), _UPDATE_TASK[settings.task])(num_classes=settings.num_classes)
    set_current(updated.update_device(device).update_amp(settings.amp))
    if settings.seed is not None:
        random.seed(settings.seed)
        torch.manual_seed(settings.seed)
    return device


def build_datasets(data: DataSection, task: str) -> tuple[Any, Any]:
    # Samples stay on the CPU; the model moves each batch to its device.
    train = DeepVisionDataset(data.train, data.kind, data_type_reader=task, device="cpu")
    valid = (
        DeepVisionDataset(data.valid, data.kind, data_type_reader=task, device="cpu")
        if data.valid
        else None
    )
    return train, valid


def build_loaders(
    data: DataSection, train: Any, valid: Any, batch_size: int, seed: int | None
) -> tuple[Any, Any]:
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    train_loader = DeepVisionLoader(train, batch_size=batch_size, shuffle=True, generator=generator)
    valid_loader = (
        DeepVisionLoader(valid, batch_size=data.valid_batch_size or batch_size, shuffle=False)
        if valid is not None
        else None
    )
    return train_loader, valid_loader


class ReportHook(Hook):
    """Sends each epoch's metrics to ``ctx.report`` (chief) and stops every rank when pruned.

    deepvisiontools' ``HookList`` catches any ``Exception`` a hook raises and trains on, so
    ``TrialPruned`` (or a failing report) is kept here, ``trainer.should_stop`` ends training
    after this epoch, and :meth:`raise_if_stopped` raises it once ``fit`` returned.
    """

    # After MetricsHook (60), LoggingHook (70), CheckpointHook (80), EarlyStoppingHook (90).
    priority = 95

    def __init__(
        self,
        ctx: Any,
        metrics_hook: Any,
        *,
        distributed: bool,
        chief: bool,
        resume_from: Path | None = None,
    ) -> None:
        self.ctx = ctx
        self.resume_from = resume_from  # trials.resume: the checkpoint fit resumes from
        self.metrics_hook = metrics_hook
        self.distributed = distributed
        self.chief = chief
        self.error: BaseException | None = None
        self.last: dict[str, float] = {}
        self.epochs_run = 0

    def _matrix(self) -> list[list[int]] | None:
        meter = getattr(self.metrics_hook, "valid_meter", None)
        matrix = getattr(getattr(meter, "accumulator", None), "conf_mat", None)
        return matrix.tolist() if isinstance(matrix, torch.Tensor) else None

    def before_train(self, trainer: Any) -> None:
        if self.resume_from is not None:
            resume_state.restore_random(self.resume_from, trainer)

    def after_epoch(self, trainer: Any, epoch: int, metrics: Any = None) -> None:
        self.epochs_run = epoch + 1
        error: BaseException | None = None
        if self.chief:
            try:
                values = epoch_metrics(
                    getattr(metrics, "losses", None),
                    getattr(metrics, "metrics", None),
                    self._matrix(),
                )
                self.last = values
                self.ctx.report(epoch, values)
            except Exception as exc:  # noqa: BLE001 - raised after fit, see the class doc
                error = exc
        stop = error is not None
        if self.distributed:
            # The other ranks learn the chief's decision at the same epoch.
            flag = torch.tensor([1 if stop else 0], dtype=torch.int64, device=_comm_device())
            dist.all_reduce(flag)
            stop = bool(flag.item())
        if stop:
            trainer.should_stop = True
            if (
                self.chief
                and isinstance(error, TrialPruned)
                and getattr(self.ctx, "pause_enabled", False)
            ):
                # trials.pause: the stop may be a pause; its continuation resumes from here.
                resume_state.save(self.ctx, trainer, epoch, force=True)
        elif self.chief:
            resume_state.save(self.ctx, trainer, epoch)  # trials.resume, when a save is due
        if error is not None:
            self.error = error

    def raise_if_stopped(self) -> None:
        if self.error is not None:
            raise self.error


def _init_distributed(device: str) -> bool:
    """Start the process group under torchrun before the batch-size search needs it
    (deepvisiontools' DDPStrategy reuses an initialized group)."""
    _, local_rank, world_size = distributed_env()
    if world_size <= 1:
        return False
    if not dist.is_initialized():
        backend = "nccl" if device.startswith("cuda") else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=backend)
    return True


def _comm_device() -> torch.device:
    # NCCL reduces CUDA tensors only; gloo CPU ones.
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _agree(n: int) -> int:
    """All ranks take the smallest batch size any of them found."""
    value = torch.tensor([n], dtype=torch.int64, device=_comm_device())
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return int(value.item())


def _choose_batch_size(
    ctx: Any, block: dict[str, Any], spec: BackendConfig, train_set: Any, distributed: bool
) -> int:
    """The loader's batch size: found by ``ctx.find_batch_size`` when ``batch_size.auto``."""
    find = getattr(ctx, "find_batch_size", None)
    settings = getattr(ctx, "batch_size_settings", None)
    if find is None or settings is None or not settings.auto:
        return spec.data.batch_size
    if settings.path != BATCH_SIZE_PATH or (
        settings.effective is not None and settings.accumulate_path != ACCUMULATE_PATH
    ):
        raise ValueError(
            f"the deepvisiontools backend applies the found batch size at {BATCH_SIZE_PATH!r} "
            f"(and accumulation at {ACCUMULATE_PATH!r}); set batch_size.path (and "
            f"batch_size.accumulate_path) to those, got {settings.path!r} / "
            f"{settings.accumulate_path!r}"
        )
    device = _resolve_requested_device(block.get("devices", {}).get("device"))
    if distributed and device.type == "cuda":
        device = torch.device("cuda", distributed_env()[1])
    fits = make_fits(lambda loader: load_config(block, loader, None), train_set, device)
    label = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    # The probes sample with replacement, so any size "fits"; the training set (each rank's
    # share under DDP) caps what a batch can really hold.
    world_size = distributed_env()[2] if distributed else 1
    samples = math.ceil(len(train_set) / world_size)
    choice = find(fits, device=label, agree=_agree if distributed else None, samples=samples)
    if choice is None:
        return spec.data.batch_size
    block.setdefault("precision", {})["accumulate_steps"] = int(choice.accumulate_steps)
    return int(choice.batch_size)


def train(
    config: Mapping[str, Any], spec: BackendConfig, folders: TrialFolders, ctx: Any
) -> dict[str, float]:
    """Train one trial (see :func:`dvt_hpo.backends.deepvisiontools.run`)."""
    device = apply_settings(spec)
    block = trainer_block(config, spec, folders)
    distributed = _init_distributed(device)
    rank = distributed_env()[0]
    train_set, valid_set = build_datasets(spec.data, spec.settings.task)
    batch_size = _choose_batch_size(ctx, block, spec, train_set, distributed)
    train_loader, valid_loader = build_loaders(
        spec.data, train_set, valid_set, batch_size, spec.settings.seed
    )
    trainer = Trainer(load_config(block, train_loader, valid_loader))
    n_params = sum(p.numel() for p in _unwrap(trainer.model).parameters())
    ctx.set_user_attrs({"n_params": n_params, "run_dir": str(trainer.run_dir)})
    resume_from = resume_state.latest(ctx)
    metrics_hook = trainer._get_hook(MetricsHook)
    hook = ReportHook(
        ctx, metrics_hook, distributed=distributed, chief=rank == 0, resume_from=resume_from
    )
    # deepvisiontools adds hooks only through this private list (1.0.5).
    trainer._hooks = HookList([*trainer._hooks._hooks, hook])
    trainer.fit(resume=str(resume_from) if resume_from is not None else None)
    hook.raise_if_stopped()
    return {**hook.last, "epochs_run": float(hook.epochs_run), "n_params": float(n_params)}


__all__ = ["ReportHook", "load_config", "train", "trainer_block"]
