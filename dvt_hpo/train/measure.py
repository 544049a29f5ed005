"""What the built-in trainer measures besides learning: size, time, memory and latency.

Reported in every epoch's metrics (so that whichever epoch a study's objective keeps has them),
for constraints such as ``n_params <= 5e6`` and latency objectives:

- ``n_params``: every parameter of the model (trainable or frozen; shared ones once, as
  ``Module.parameters()`` yields them; buffers such as BatchNorm statistics are not parameters).
- ``epoch_s``: wall seconds of the epoch's training and its validation (not the one-off latency
  measurement, checkpoints or the report).
- ``peak_memory_mb``: MiB. On CUDA ``torch.cuda.max_memory_allocated`` since training began
  (tensors only: not the allocator's cache nor the CUDA context; the batch-size probes before
  training reset it themselves and are left out). On CPU the process's peak resident set size
  (``getrusage(RUSAGE_SELF).ru_maxrss``) since it started: it includes the interpreter, torch,
  the dataset and any batch-size probes, so even a tiny model reports a few hundred MiB.
- ``latency_ms``: batch-1 inference latency (:func:`inference_latency_ms`), measured once per
  run: the architecture, not the weights, sets its cost.
"""

from __future__ import annotations

import logging
import resource
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from dvt_hpo.train.config import LatencyConfig
from dvt_hpo.train.metric_names import MEASURED

__all__ = [
    "MEASURED_METRICS",
    "TrialMeasures",
    "count_parameters",
    "inference_latency_ms",
    "peak_memory_mb",
]

log = logging.getLogger("dvt_hpo.train")

MEASURED_METRICS = MEASURED  # one list with validate's check of the objective

# ru_maxrss is in KiB on Linux and in bytes on macOS.
_RSS_UNIT = 1 if sys.platform == "darwin" else 1024


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory in MiB: CUDA tensors allocated on ``device``, else the process's peak RSS."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * _RSS_UNIT / 2**20


@torch.inference_mode()
def inference_latency_ms(
    model: nn.Module,
    sample: torch.Tensor,
    *,
    warmup: int,
    repeats: int,
    autocast: Callable[[], AbstractContextManager[Any]],
) -> float:
    """Median milliseconds of ``repeats`` forward passes of ``sample`` (a batch), timed one by
    one after ``warmup`` untimed passes, with ``model`` in eval mode under ``autocast()``.

    On CUDA each pass is bracketed by ``torch.cuda.synchronize`` so that it times the kernels,
    not their launch. Runs with the process's current torch thread count. The median resists a
    pass slowed by another process on a shared machine; the model's train/eval mode is
    restored.
    """
    device = sample.device
    cuda = device.type == "cuda"
    was_training = model.training
    model.eval()
    try:
        with autocast():
            for _ in range(warmup):
                model(sample)
            times: list[float] = []
            for _ in range(repeats):
                if cuda:
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
                model(sample)
                if cuda:
                    torch.cuda.synchronize(device)
                times.append(time.perf_counter() - start)
    finally:
        model.train(was_training)
    return statistics.median(times) * 1e3


class TrialMeasures:
    """The measured metrics of one run; built when the model is, before the first epoch."""

    def __init__(self, model: nn.Module, device: torch.device, latency: LatencyConfig) -> None:
        self.n_params = count_parameters(model)
        self.device = device
        self.latency = latency
        self.latency_ms: float | None = None
        reset_peak_memory(device)

    def measure_latency(
        self,
        model: nn.Module,
        sample: torch.Tensor,
        autocast: Callable[[], AbstractContextManager[Any]],
    ) -> None:
        """Time ``model`` on one ``sample`` (without its batch dimension), once per run.

        ``sample`` is a real one: random inputs would draw from the global RNG and change the
        rest of the training (dropout masks, shuffling) compared with latency off.
        """
        if not self.latency.enabled or self.latency_ms is not None:
            return
        began = time.perf_counter()
        self.latency_ms = inference_latency_ms(
            model,
            sample.unsqueeze(0).to(self.device),
            warmup=self.latency.warmup,
            repeats=self.latency.repeats,
            autocast=autocast,
        )
        log.info(
            "latency %.4g ms: batch 1, median of %d passes after %d warm-up, %d threads "
            "(measured in %.3f s)",
            self.latency_ms,
            self.latency.repeats,
            self.latency.warmup,
            torch.get_num_threads(),
            time.perf_counter() - began,
        )

    def values(self, epoch_s: float) -> dict[str, float]:
        """This epoch's measured metrics. ``latency_ms`` is 0.0 where it was not measured (the
        other DDP ranks): the trainer takes the maximum over ranks, i.e. the chief's value."""
        values = {
            "n_params": float(self.n_params),
            "epoch_s": epoch_s,
            "peak_memory_mb": peak_memory_mb(self.device),
        }
        if self.latency.enabled:
            values["latency_ms"] = self.latency_ms or 0.0
        return values
