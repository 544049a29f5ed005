"""The built-in trainer: classification with torch, read top to bottom in :meth:`Trainer.fit`.

One process trains alone; under ``torchrun`` (``LOCAL_RANK`` set and ``WORLD_SIZE`` > 1) each
rank joins a process group (gloo on CPU, nccl on CUDA), reads its shard of the data and trains
a DDP-wrapped model. Validation metrics are global: confusion matrices and loss sums are summed
over ranks before macro-F1 is computed. Only rank 0 reports and writes checkpoints. Each epoch
also reports what :mod:`dvt_hpo.train.measure` measures (size, time, memory, latency).
"""

from __future__ import annotations

import contextlib
import copy
import gc
import logging
import math
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

from dvt_hpo.atomic import copy_atomic, write_atomic
from dvt_hpo.batch import probe
from dvt_hpo.exceptions import SpecError, TrialPruned
from dvt_hpo.metrics import (
    accuracy_from_confusion_matrix,
    counts_from_confusion_matrix,
    macro_f1,
)
from dvt_hpo.train import resume as resume_state
from dvt_hpo.train.config import (
    CheckpointConfig,
    EmaConfig,
    OptimConfig,
    PrecisionConfig,
    SchedConfig,
    TrainerConfig,
    import_target,
)
from dvt_hpo.train.data import DataBundle, build_data
from dvt_hpo.train.measure import TrialMeasures
from dvt_hpo.train.metric_names import LEARNED
from dvt_hpo.train.models import build_model

__all__ = [
    "Checkpointer",
    "DistInfo",
    "Ema",
    "Trainer",
    "build_optimizer",
    "build_scheduler",
    "make_fits",
    "resolve_device",
    "run",
]

log = logging.getLogger("dvt_hpo.train")

# One list with validate's check of the objective (dvt_hpo.spec.known_metrics).
REPORTED_METRICS = LEARNED
_AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def run(config: Mapping[str, Any] | TrainerConfig, ctx: Any) -> dict[str, float]:
    """Entry point ``dvt_hpo.train:run``: train ``config`` and report each epoch to ``ctx``."""
    cfg = config if isinstance(config, TrainerConfig) else TrainerConfig.from_dict(config)
    return Trainer(cfg, ctx).fit()


# --------------------------------------------------------------------------------------------
# Processes and devices


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_chief(self) -> bool:
        return self.rank == 0


def dist_info_from_env(strategy: str) -> DistInfo:
    """The torchrun layout of this process; a single process when not under torchrun."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if "LOCAL_RANK" not in os.environ or world_size <= 1:
        return DistInfo()
    if strategy == "single":
        raise SpecError(
            f"strategy 'single' but this process was launched with WORLD_SIZE={world_size}; "
            "use strategy 'auto' or 'ddp' under torchrun",
            field="devices.strategy",
        )
    return DistInfo(int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), world_size)


def resolve_device(device: str, info: DistInfo) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; each DDP rank takes ``cuda:LOCAL_RANK``."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SpecError(f"device {device!r} but CUDA is not available here", field="devices.device")
    if info.enabled:
        # The launcher selects the physical GPUs with CUDA_VISIBLE_DEVICES.
        return torch.device("cuda", info.local_rank)
    index = int(device.partition(":")[2] or torch.cuda.current_device())
    if index >= torch.cuda.device_count():
        raise SpecError(
            f"device {device!r} but only {torch.cuda.device_count()} CUDA devices are visible",
            field="devices.device",
        )
    return torch.device("cuda", index)


def device_label(device: torch.device) -> str:
    """Names the device model and memory: part of the batch-size cache key."""
    if device.type != "cuda":
        return device.type
    props = torch.cuda.get_device_properties(device)
    return f"{torch.cuda.get_device_name(device)}/{props.total_memory}"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds every CUDA device too


def set_threads_from_env() -> None:
    # torch sizes its pool from the core count, not from the slot the launcher gave the trial.
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))


def set_runtime(cfg: TrainerConfig) -> None:
    """What changes numbers besides the seed: the thread count (``devices.threads``, else the
    slot's ``OMP_NUM_THREADS``) and ``deterministic``."""
    if cfg.devices.threads is not None:
        torch.set_num_threads(cfg.devices.threads)
    else:
        set_threads_from_env()
    if cfg.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False


# --------------------------------------------------------------------------------------------
# Optimizer, scheduler, precision, EMA


def build_optimizer(cfg: OptimConfig, params: Any) -> torch.optim.Optimizer:
    cls = import_target(cfg.target, "optim.target")
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        raise SpecError(
            f"{cfg.target!r} is not a torch.optim.Optimizer class", field="optim.target"
        )
    try:
        return cls(params, **cfg.optim_args, weight_decay=cfg.weight_decay)
    except (TypeError, ValueError) as exc:
        raise SpecError(
            f"{cfg.target} rejected its arguments: {exc}", field="optim.optim_args"
        ) from None


def build_scheduler(
    cfg: SchedConfig | None,
    optimizer: torch.optim.Optimizer,
    *,
    epochs: int,
    steps_per_epoch: int,
) -> Any:
    """The scheduler, wrapped in a linear warm-up (``SequentialLR``) when one is set.

    Units are those of ``step_on``: epochs, or optimizer steps. ``CosineAnnealingLR`` without
    ``T_max`` anneals over the whole run after the warm-up.
    """
    if cfg is None:
        return None
    per_unit = 1 if cfg.step_on == "epoch" else steps_per_epoch
    total_units = epochs * per_unit
    warmup_units = 0
    if cfg.warmup is not None:
        if cfg.warmup.steps is not None:
            if cfg.step_on == "epoch":
                raise SpecError(
                    "warm-up in steps needs step_on: step; with step_on: epoch use warmup.epochs",
                    field="sched.warmup.steps",
                )
            warmup_units = cfg.warmup.steps
        else:
            assert cfg.warmup.epochs is not None
            warmup_units = cfg.warmup.epochs * per_unit
    cls = import_target(cfg.target, "sched.target")
    args = dict(cfg.sched_args)
    if cls is torch.optim.lr_scheduler.CosineAnnealingLR and "T_max" not in args:
        args["T_max"] = max(1, total_units - warmup_units)
    try:
        main = cls(optimizer, **args)
    except (TypeError, ValueError) as exc:
        raise SpecError(
            f"{cfg.target} rejected its arguments: {exc}", field="sched.sched_args"
        ) from None
    if isinstance(main, torch.optim.lr_scheduler.ReduceLROnPlateau):
        if warmup_units or cfg.step_on != "epoch":
            raise SpecError(
                "ReduceLROnPlateau steps on the validation loss once per epoch: it takes "
                "step_on: epoch and no warm-up",
                field="sched",
            )
        return main
    if not warmup_units:
        return main
    warmup = torch.optim.lr_scheduler.LinearLR(
        optimizer, start_factor=cfg.warmup.start_factor, total_iters=warmup_units
    )
    return torch.optim.lr_scheduler.SequentialLR(
        optimizer, schedulers=[warmup, main], milestones=[warmup_units]
    )


@dataclass(frozen=True)
class Precision:
    """Autocast and loss scaling of one device, from ``precision``."""

    device_type: str
    dtype: torch.dtype | None  # None: full precision

    @classmethod
    def from_config(cls, cfg: PrecisionConfig, device: torch.device) -> Precision:
        dtype = _AMP_DTYPES.get(cfg.amp_dtype) if cfg.amp else None
        return cls(device.type, dtype)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def scaler(self) -> Any:
        # fp16 gradients underflow without loss scaling; bf16 has fp32's range and needs none.
        enabled = self.dtype is torch.float16 and self.device_type == "cuda"
        scaler_cls = getattr(torch.amp, "GradScaler", None)
        if scaler_cls is None:  # torch < 2.3
            return torch.cuda.amp.GradScaler(enabled=enabled)
        return scaler_cls(self.device_type, enabled=enabled)


class Ema:
    """Exponential moving average of a model's weights and buffers.

    Updated every ``update_every`` optimizer steps; during the first ``warmup_steps`` it copies
    the model instead of averaging (early weights are noise not worth remembering).
    """

    def __init__(self, model: nn.Module, cfg: EmaConfig) -> None:
        self.module = copy.deepcopy(model).eval()
        self.module.requires_grad_(False)
        self.cfg = cfg

    @torch.no_grad()
    def update(self, model: nn.Module, step: int) -> None:
        if step % self.cfg.update_every:
            return
        copy_only = step <= self.cfg.warmup_steps
        pairs = zip(self.module.state_dict().values(), model.state_dict().values(), strict=True)
        for average, current in pairs:
            if copy_only or not average.dtype.is_floating_point:
                average.copy_(current)
            else:
                average.lerp_(current, 1.0 - self.cfg.decay)


# --------------------------------------------------------------------------------------------
# Checkpoints


class Checkpointer:
    """``last.pt`` every epoch, ``best.pt`` when ``monitor`` improves, and ``epoch-NNNN.pt``
    every ``save_every_n_epochs`` epochs, of which the newest ``keep_last_n`` are kept."""

    def __init__(self, cfg: CheckpointConfig, output_dir: str) -> None:
        if cfg.monitor not in REPORTED_METRICS:
            raise SpecError(
                f"monitor {cfg.monitor!r} is not a metric of this trainer; one of "
                f"{', '.join(REPORTED_METRICS)}",
                field="checkpoint.monitor",
            )
        self.cfg = cfg
        self.dir = Path(cfg.dir) if cfg.dir else Path(output_dir) / "checkpoints"
        self.best: float | None = None

    def save(self, epoch: int, metrics: Mapping[str, float], state: Mapping[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        last = self.dir / "last.pt"
        write_atomic(last, lambda f: torch.save(dict(state), f))
        value = metrics[self.cfg.monitor]
        better = self.best is None or (
            value > self.best if self.cfg.mode == "max" else value < self.best
        )
        if better and math.isfinite(value):
            self.best = value
            copy_atomic(last, self.dir / "best.pt")
        if (epoch + 1) % self.cfg.save_every_n_epochs == 0:
            copy_atomic(last, self.dir / f"epoch-{epoch:04d}.pt")
            periodic = sorted(self.dir.glob("epoch-*.pt"))
            for old in periodic[: -self.cfg.keep_last_n]:
                old.unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------
def optimizer_step(
    optimizer: torch.optim.Optimizer, scaler: Any, model: nn.Module, grad_clip: float | None
) -> None:
    """Clip (on unscaled gradients), step, update the loss scale, zero the gradients.

    Training and the batch-size probe share it, so a probe allocates what a real step does.
    """
    if grad_clip is not None:
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)


# Batch-size probing

# Share of extra samples each probe runs (see make_fits).
PROBE_HEADROOM = 0.05


def make_fits(
    cfg: TrainerConfig,
    in_shape: Sequence[int],
    num_classes: int,
    device: torch.device,
    *,
    ddp: bool = False,
) -> Callable[[int], Any]:
    """A ``fits(n)`` predicate for ``ctx.find_batch_size``: real steps at batch size ``n``.

    Each probe builds a fresh model and optimizer (cheap next to the steps, and nothing from an
    earlier probe, such as optimizer state or a half-allocated OOM, can skew the next one),
    then runs 2 training steps (forward, backward, optimizer step with its state allocated) at
    the trial's AMP, clipping and EMA settings and 1 evaluation step, on random inputs of the
    samples' shape. Under DDP a buffer the size of the gradients stands for DDP's gradient
    buckets (the probe itself is not wrapped: ranks probe independently, without collectives).

    Each probe runs ``n`` plus :data:`PROBE_HEADROOM` of ``n`` samples: the search stops within
    its tolerance of the limit, and a whole epoch needs a little more than two probe steps. On
    CPU the loader's batches share the memory the probe measures (and ``trials.memory_limit``
    counts them): the probe also builds each step's batch from per-sample tensors while the
    previous batch is alive, as the training loop does.

    Returns a ``dvt_hpo.batch.search.Probe`` with the peak and the memory allowed (the GPU, or the
    trial's share of it under ``trials.per_gpu``) on CUDA, ``True``
    elsewhere (:func:`dvt_hpo.batch.probe.measuring` around these steps). Out-of-memory errors
    propagate (the search classifies them); memory is freed first, including the locals of the
    frames in the exception's traceback.
    """
    precision = Precision.from_config(cfg.precision, device)
    cuda = device.type == "cuda"

    def steps(n: int) -> None:
        rows = n + math.ceil(n * PROBE_HEADROOM)
        model = build_model(cfg.model, in_shape, num_classes).to(device)
        optimizer = build_optimizer(cfg.optim, model.parameters())
        try:
            ema = Ema(model, cfg.ema) if cfg.ema.enabled else None
            # A stand-in for DDP's gradient buckets, alive through every step.
            buckets = (
                torch.empty(sum(p.numel() for p in model.parameters()), device=device)
                if ddp
                else None
            )
            scaler = precision.scaler()
            inputs = torch.rand(rows, *in_shape, device=device)
            labels = torch.randint(0, num_classes, (rows,), device=device)
            model.train()
            for step in (1, 2):
                if not cuda:
                    # The DataLoader collates the next batch from per-sample tensors while the
                    # loop still holds the previous one: three batches at once in host memory.
                    samples = torch.rand(rows, *in_shape, device=device)
                    inputs = torch.stack(tuple(samples))
                    del samples
                with precision.autocast():
                    logits = model(inputs)
                    loss = F.cross_entropy(logits, labels)
                scaler.scale(loss).backward()
                logits = loss = None
                optimizer_step(optimizer, scaler, model, cfg.precision.grad_clip)
                if ema is not None:
                    ema.update(model, step)
            eval_model = ema.module if ema is not None and cfg.ema.eval_with_ema else model
            eval_model.eval()
            with torch.no_grad(), precision.autocast():
                logits = eval_model(inputs)
            del buckets
        finally:
            optimizer.zero_grad(set_to_none=True)

    return probe.measuring(steps, device)


# --------------------------------------------------------------------------------------------
# The trainer


@dataclass(frozen=True)
class _Training:
    """What a run trains with, built once by :meth:`Trainer._fit` and used by every epoch."""

    data: DataBundle
    model: nn.Module  # DDP-wrapped under torchrun, else raw_model
    raw_model: nn.Module
    train_loader: DataLoader[Any]
    train_sampler: DistributedSampler[Any] | None
    val_loader: DataLoader[Any]
    optimizer: Any
    scheduler: Any
    step_on: str
    precision: Precision
    scaler: Any
    ema: Ema | None
    eval_model: nn.Module
    measures: TrialMeasures
    checkpointer: Checkpointer | None

    @property
    def generator(self) -> Any:
        """The training loader's generator: its state is part of the resume state."""
        return self.train_loader.generator

    def checkpoint(
        self, epoch: int, metrics: dict[str, float], cfg: TrainerConfig
    ) -> dict[str, Any]:
        """What ``checkpoint.enable_checkpointing`` saves after ``epoch``."""
        return {
            "epoch": epoch,
            "metrics": metrics,
            "model": self.raw_model.state_dict(),
            "ema": self.ema.module.state_dict() if self.ema is not None else None,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": self.scaler.state_dict(),
            "config": cfg.to_dict(),
            "class_names": list(self.data.class_names),
        }


class Trainer:
    """Trains ``cfg`` and reports each epoch to ``ctx`` (see :meth:`fit`)."""

    def __init__(self, cfg: TrainerConfig, ctx: Any) -> None:
        self.cfg = cfg
        self.ctx = ctx
        self._chief_stopped = False  # the chief left early (pruned or failed in ctx.report)
        self._batch_attrs: dict[str, Any] = {}  # a resumed run's batch-size attrs

    def fit(self) -> dict[str, float]:
        set_runtime(self.cfg)
        info = dist_info_from_env(self.cfg.devices.strategy)
        device = resolve_device(self.cfg.devices.device, info)
        self.info, self.device = info, device
        started_group = False
        if info.enabled and not dist.is_initialized():
            if device.type == "cuda":
                torch.cuda.set_device(device)
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
            started_group = True
        try:
            result = self._fit()
            if started_group and not self._chief_stopped:
                dist.barrier()  # no peer is still inside a collective when the group goes
            return result
        finally:
            if started_group:
                # DDP's reducer sits in reference cycles and outlives _fit; left to interpreter
                # shutdown, gloo's threads abort the process (SIGABRT) now and then.
                gc.collect()
                dist.destroy_process_group()

    def _fit(self) -> dict[str, float]:
        cfg, info, device = self.cfg, self.info, self.device
        checkpointer = None
        if cfg.checkpoint.enable_checkpointing and info.is_chief:
            checkpointer = Checkpointer(cfg.checkpoint, cfg.output_dir)

        # 1. Data (the split is seeded by cfg.seed, the same on every rank).
        data = build_data(cfg.data, cfg.seed)

        # 2. Batch size: the largest that fits, found by real steps, shared by all ranks (a
        # resumed run keeps the one it trained with: trials.resume).
        resumed = resume_state.load(self.ctx)
        if resumed is None:
            cfg = self._choose_batch_size(cfg, data)
        else:
            cfg = cfg.with_values(resumed.batch)
            self._batch_attrs = resumed.batch_attrs
            if self._batch_attrs and hasattr(self.ctx, "set_user_attrs"):
                self.ctx.set_user_attrs(self._batch_attrs)
        self.cfg = cfg

        # 3. Model, optimizer, scheduler, precision, EMA. Seeded after the probes so that the
        # run does not depend on how many probes the search made.
        seed_everything(cfg.seed)
        raw_model = build_model(cfg.model, data.in_shape, data.num_classes).to(device)
        model: nn.Module = raw_model
        if info.enabled:
            device_ids = [device.index] if device.type == "cuda" else None
            model = nn.parallel.DistributedDataParallel(raw_model, device_ids=device_ids)
        train_loader, train_sampler, val_loader = self._loaders(data)
        accumulate = cfg.precision.accumulate_steps
        steps_per_epoch = math.ceil(len(train_loader) / accumulate)
        optimizer = build_optimizer(cfg.optim, raw_model.parameters())
        scheduler = build_scheduler(
            cfg.sched, optimizer, epochs=cfg.epochs, steps_per_epoch=steps_per_epoch
        )
        step_on = cfg.sched.step_on if cfg.sched is not None else "epoch"
        precision = Precision.from_config(cfg.precision, device)
        scaler = precision.scaler()
        ema = Ema(raw_model, cfg.ema) if cfg.ema.enabled else None
        eval_model = ema.module if ema is not None and cfg.ema.eval_with_ema else raw_model
        measures = TrialMeasures(raw_model, device, cfg.eval.latency)
        set_attrs = getattr(self.ctx, "set_user_attrs", None)
        if set_attrs is not None:
            # What the trial ran with that changes its numbers, for `best --export` to rerun.
            set_attrs({"n_params": measures.n_params, "threads": torch.get_num_threads()})
        log.info(
            "training %s on %s x%d, batch %d x %d accumulated, %d epochs",
            cfg.model.builder,
            device,
            info.world_size,
            cfg.data.batch_size,
            accumulate,
            cfg.epochs,
        )

        # 4. Epochs: train, validate (global metrics), report, checkpoint.
        training = _Training(
            data=data,
            model=model,
            raw_model=raw_model,
            train_loader=train_loader,
            train_sampler=train_sampler,
            val_loader=val_loader,
            optimizer=optimizer,
            scheduler=scheduler,
            step_on=step_on,
            precision=precision,
            scaler=scaler,
            ema=ema,
            eval_model=eval_model,
            measures=measures,
            checkpointer=checkpointer,
        )
        optimizer_steps = 0
        metrics: dict[str, float] = {}
        epochs_run = first_epoch = 0
        if resumed is not None:
            modules = {"model": raw_model, "ema": ema, "optimizer": optimizer}
            resume_state.restore_modules(resumed, **modules, scheduler=scheduler, scaler=scaler)
            resume_state.restore_random(resumed, training.generator)
            first_epoch = epochs_run = resumed.next_epoch
            optimizer_steps, metrics = resumed.optimizer_steps, resumed.metrics
            log.info("resumed after epoch %d", first_epoch - 1)
        for epoch in range(first_epoch, cfg.epochs):
            metrics, optimizer_steps, stop = self._epoch(training, epoch, optimizer_steps)
            epochs_run = epoch + 1
            if stop:
                break
        return {**metrics, "epochs_run": float(epochs_run)}

    def _epoch(
        self, training: _Training, epoch: int, optimizer_steps: int
    ) -> tuple[dict[str, float], int, bool]:
        """One epoch: train, validate, step the scheduler, checkpoint, report, save the resume
        state. Returns the epoch's metrics, the optimizer steps taken so far and whether the
        other ranks must stop (the chief raises ``TrialPruned`` instead)."""
        cfg, info = self.cfg, self.info
        t0 = time.perf_counter()
        if training.train_sampler is not None:
            training.train_sampler.set_epoch(epoch)
        train_loss, optimizer_steps = self._train_epoch(
            training.model,
            training.raw_model,
            training.train_loader,
            optimizer_steps,
            optimizer=training.optimizer,
            scaler=training.scaler,
            precision=training.precision,
            ema=training.ema,
            scheduler=training.scheduler if training.step_on == "step" else None,
        )
        metrics = {
            "train_loss": train_loss,
            **self.evaluate(training.eval_model, training.val_loader, training.data),
        }
        metrics = {key: metrics[key] for key in REPORTED_METRICS}
        epoch_s = time.perf_counter() - t0
        if info.is_chief:  # once per run, on the unwrapped model (see measure.py)
            training.measures.measure_latency(
                training.eval_model, training.data.val[0][0], training.precision.autocast
            )
        # The same values on every rank: the slowest rank's time and memory, the chief's
        # latency.
        metrics.update(self._global_max(training.measures.values(epoch_s)))
        scheduler = training.scheduler
        if scheduler is not None and training.step_on == "epoch":
            if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
                scheduler.step(metrics["loss"])
            else:
                scheduler.step()
        log.info("epoch %d: %s", epoch, metrics)
        if training.checkpointer is not None:
            training.checkpointer.save(epoch, metrics, training.checkpoint(epoch, metrics, cfg))
        parts = {
            "optimizer_steps": optimizer_steps,
            "metrics": metrics,
            "model": training.raw_model,
            "ema": training.ema,
            "optimizer": training.optimizer,
            "scheduler": scheduler,
            "scaler": training.scaler,
            "generator": training.generator,
        }
        try:
            stop = self._report(epoch, metrics)
        except TrialPruned:
            # trials.pause: the stop may be a pause; its continuation starts from here.
            if getattr(self.ctx, "pause_enabled", False):
                self._save_resume(epoch, force=True, **parts)
            raise
        if not stop:
            self._save_resume(epoch, **parts)
        return metrics, optimizer_steps, stop

    # ---- pieces of fit ---------------------------------------------------------------------

    def _train_epoch(
        self,
        model: nn.Module,
        raw_model: nn.Module,
        train_loader: Any,
        optimizer_steps: int,
        *,
        optimizer: Any,
        scaler: Any,
        precision: Precision,
        ema: Ema | None,
        scheduler: Any,
    ) -> tuple[float, int]:
        """One pass over the training data: the epoch's mean training loss (over every rank)
        and the optimizer steps taken so far. ``scheduler``: stepped at each optimizer step
        (``sched.step_on: step``), else None."""
        cfg, info, device = self.cfg, self.info, self.device
        accumulate = cfg.precision.accumulate_steps
        model.train()
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        seen = 0
        n_batches = len(train_loader)
        for i, (inputs, labels) in enumerate(train_loader):
            inputs = inputs.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            group_start = i - i % accumulate
            group_len = min(accumulate, n_batches - group_start)
            steps_now = i - group_start == group_len - 1
            # DDP all-reduces gradients on every backward unless told not to: only the
            # last micro-batch of an accumulation group needs it.
            defer = info.enabled and not steps_now
            sync = model.no_sync() if defer else contextlib.nullcontext()
            with sync:
                with precision.autocast():
                    loss = F.cross_entropy(model(inputs), labels)
                scaler.scale(loss / group_len).backward()
            loss_sum += loss.detach().double() * labels.shape[0]
            seen += labels.shape[0]
            if not steps_now:
                continue
            optimizer_step(optimizer, scaler, raw_model, cfg.precision.grad_clip)
            optimizer_steps += 1
            if ema is not None:
                ema.update(raw_model, optimizer_steps)
            if scheduler is not None:
                scheduler.step()
        return self._global_mean(loss_sum, seen), optimizer_steps

    def _save_resume(self, epoch: int, *, force: bool = False, **parts: Any) -> None:
        """``trials.resume``: the state after ``epoch`` (rank 0, when due or ``force``; not
        after the last epoch, which only the result follows)."""
        due = getattr(self.ctx, "resume_due", None)
        if epoch + 1 >= self.cfg.epochs or due is None or not (force or due()):
            return
        choice = getattr(self.ctx, "batch_size_choice", None)
        batch = {
            "data.batch_size": self.cfg.data.batch_size,
            "precision.accumulate_steps": self.cfg.precision.accumulate_steps,
        }
        attrs = choice.user_attrs() if choice is not None else self._batch_attrs
        state = resume_state.capture(epoch=epoch, batch=batch, batch_attrs=attrs, **parts)
        self.ctx.save_state(state, step=epoch, force=force)

    def _choose_batch_size(self, cfg: TrainerConfig, data: DataBundle) -> TrainerConfig:
        find = getattr(self.ctx, "find_batch_size", None)
        if find is None:
            return cfg
        info, device = self.info, self.device
        fits = make_fits(cfg, data.in_shape, data.num_classes, device, ddp=info.enabled)
        # The probes run on random tensors of any size; the data caps what a batch can hold
        # (per rank: DistributedSampler pads every rank's share to the same size).
        samples = math.ceil(len(data.train) / info.world_size)  # type: ignore[arg-type]
        choice = find(
            fits,
            device=device_label(device),
            agree=self._agree if info.enabled else None,
            samples=samples,
        )
        if choice is None:
            return cfg
        log.info(
            "batch size %d x %d accumulated (cache %s)",
            choice.batch_size,
            choice.accumulate_steps,
            getattr(choice, "cache", "?"),
        )
        return cfg.with_values(
            {
                "data.batch_size": int(choice.batch_size),
                "precision.accumulate_steps": int(choice.accumulate_steps),
            }
        )

    def _agree(self, n: int) -> int:
        """All ranks take the smallest size any of them found."""
        value = torch.tensor([n], dtype=torch.int64, device=self._comm_device())
        dist.all_reduce(value, op=dist.ReduceOp.MIN)
        return int(value.item())

    def _comm_device(self) -> torch.device:
        return self.device if self.device.type == "cuda" else torch.device("cpu")

    def _loaders(
        self, data: DataBundle
    ) -> tuple[DataLoader[Any], DistributedSampler[Any] | None, DataLoader[Any]]:
        cfg, info = self.cfg, self.info
        common: dict[str, Any] = {
            "batch_size": cfg.data.batch_size,
            "num_workers": cfg.data.num_workers,
            "pin_memory": cfg.devices.pin_memory and self.device.type == "cuda",
            "persistent_workers": cfg.data.num_workers > 0,
        }
        sampler = None
        if info.enabled:
            # Pads to equal shard sizes: every rank must run the same number of steps.
            sampler = DistributedSampler(
                data.train, num_replicas=info.world_size, rank=info.rank, seed=cfg.seed
            )
        train = DataLoader(
            data.train,
            shuffle=sampler is None,
            sampler=sampler,
            generator=torch.Generator().manual_seed(cfg.seed),
            **common,
        )
        val_set: Dataset[Any] = data.val
        if info.enabled:
            # A strided shard without padding, so the summed confusion matrix counts every
            # validation sample exactly once.
            n_val = len(data.val)  # type: ignore[arg-type]
            val_set = Subset(data.val, range(info.rank, n_val, info.world_size))
        val = DataLoader(val_set, shuffle=False, **common)
        return train, sampler, val

    def _global_sum(self, values: list[float]) -> list[float]:
        tensor = torch.tensor(values, dtype=torch.float64, device=self._comm_device())
        if self.info.enabled:
            dist.all_reduce(tensor)
        return tensor.tolist()

    def _global_max(self, metrics: dict[str, float]) -> dict[str, float]:
        if not self.info.enabled:
            return metrics
        tensor = torch.tensor(
            list(metrics.values()), dtype=torch.float64, device=self._comm_device()
        )
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return dict(zip(metrics, tensor.tolist(), strict=True))

    def _global_mean(self, total: torch.Tensor, count: int) -> float:
        summed, n = self._global_sum([float(total.item()), float(count)])
        return summed / n if n else math.nan

    @torch.no_grad()
    def evaluate(
        self, model: nn.Module, loader: DataLoader[Any], data: DataBundle
    ) -> dict[str, float]:
        """Validation loss, accuracy and macro-F1 over the whole validation set (all ranks).

        Runs the unwrapped model: DDP's forward would sync buffers, and ranks may hold
        different numbers of validation batches.
        """
        k = data.num_classes
        device = self.device
        precision = Precision.from_config(self.cfg.precision, device)
        if self.info.enabled:
            # BatchNorm running stats drift apart per rank (DDP broadcasts them before each
            # forward, then every rank updates its own): evaluate rank 0's, the checkpointed ones.
            for buffer in model.buffers():
                dist.broadcast(buffer, src=0)
        model.eval()
        confusion = torch.zeros(k * k, dtype=torch.int64, device=device)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        for inputs, labels in loader:
            inputs = inputs.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            with precision.autocast():
                logits = model(inputs)
            loss_sum += F.cross_entropy(logits.float(), labels, reduction="sum").double()
            confusion += torch.bincount(labels * k + logits.argmax(dim=1), minlength=k * k)
        if self.info.enabled:
            confusion = confusion.to(self._comm_device())
            dist.all_reduce(confusion)
            loss_sum = loss_sum.to(self._comm_device())
            dist.all_reduce(loss_sum)
        matrix = confusion.view(k, k).tolist()
        total = sum(map(sum, matrix))
        counts = counts_from_confusion_matrix(matrix)
        return {
            "loss": float(loss_sum.item()) / total,
            "accuracy": accuracy_from_confusion_matrix(matrix),
            "macro_f1": macro_f1(counts),
        }

    def _report(self, epoch: int, metrics: dict[str, float]) -> bool:
        """Report on the chief; True when the other ranks must stop (the chief raises).

        ``ctx.report`` raises ``TrialPruned`` on the chief when the study prunes the trial;
        the other ranks learn it through one all-reduced flag and stop at the same epoch
        instead of waiting in a collective for a chief that has left.
        """
        error: BaseException | None = None
        if self.info.is_chief:
            try:
                self.ctx.report(epoch, dict(metrics))
            except BaseException as exc:  # noqa: BLE001 - re-raised below, after the ranks agree
                error = exc
        stop = error is not None
        if self.info.enabled:
            stop = self._global_sum([1.0 if stop else 0.0])[0] > 0
        if error is not None:
            raise error
        self._chief_stopped = stop
        return stop
