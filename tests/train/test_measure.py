"""What the built-in trainer measures: n_params, epoch_s, peak_memory_mb and latency_ms."""

from __future__ import annotations

import contextlib
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from dvt_hpo.train import measure as measure_module
from dvt_hpo.train import run
from dvt_hpo.train.config import LatencyConfig, ModelConfig
from dvt_hpo.train.measure import MEASURED_METRICS, inference_latency_ms, peak_memory_mb
from dvt_hpo.train.models import build_model, register_model

LEARNED = ("loss", "train_loss", "accuracy", "macro_f1")

# Batch sizes every forward call of a "test-count-forward" model saw, per model built.
FORWARD_BATCHES: list[Counter[int]] = []


@register_model("test-count-forward")
def count_forward(in_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The cnn with dropout (it draws random numbers), counting forward calls by batch size."""
    seen: Counter[int] = Counter()
    FORWARD_BATCHES.append(seen)

    class Counted(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = build_model(
                ModelConfig("cnn", {"width": 8, "dropout": 0.2}), in_shape, num_classes
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen[x.shape[0]] += 1
            return self.net(x)

    return Counted()


@pytest.fixture
def forward_batches() -> Iterator[list[Counter[int]]]:
    FORWARD_BATCHES.clear()
    yield FORWARD_BATCHES
    FORWARD_BATCHES.clear()


def test_every_epoch_reports_the_measures_and_n_params_follows_the_width(
    fake_ctx: Any, make_config: Callable[..., dict]
) -> None:
    counts = {}
    for width in (8, 16):
        config = make_config(epochs=2, model={"kwargs": {"width": width}})
        ctx = fake_ctx()
        result = run(config, ctx)
        built = build_model(ModelConfig("cnn", {"width": width}), (1, 8, 8), 10)
        expected = sum(p.numel() for p in built.parameters())
        assert [step for step, _ in ctx.reports] == [0, 1]
        for _, metrics in ctx.reports:
            assert set(metrics) == {*LEARNED, *MEASURED_METRICS}
            assert metrics["n_params"] == expected
            assert 0 < metrics["epoch_s"] < 120 and 0 < metrics["latency_ms"] < 1000
            # CPU: the process's peak RSS, interpreter and torch included.
            assert 50 < metrics["peak_memory_mb"] < 64 * 1024
        (_, first), (_, second) = ctx.reports
        assert first["latency_ms"] == second["latency_ms"]  # measured once, repeated
        assert second["peak_memory_mb"] >= first["peak_memory_mb"]  # a peak never falls
        assert ctx.user_attrs == {"n_params": expected, "threads": torch.get_num_threads()}
        assert result == {**second, "epochs_run": 2.0}
        counts[width] = expected
    assert counts[8] != counts[16]


def test_latency_is_measured_once_on_batch_one_and_does_not_change_training(
    fake_ctx: Any, make_config: Callable[..., dict], forward_batches: list[Counter[int]]
) -> None:
    # 160 training and 40 validation samples in batches of 32: no batch of 1 but the timed ones.
    base = {"epochs": 3, "model": {"builder": "test-count-forward", "kwargs": {}}}
    base["data"] = {"max_samples": 200, "batch_size": 32}
    on = fake_ctx()
    run(make_config(**base, eval={"latency": {"warmup": 2, "repeats": 3}}), on)
    off = fake_ctx()
    run(make_config(**base, eval={"latency": {"enabled": False}}), off)
    with_latency, without = forward_batches
    assert with_latency[1] == 2 + 3 and 1 not in without
    assert with_latency - Counter({1: 5}) == without
    assert {on.reports[i][1]["latency_ms"] for i in range(3)} == {on.reports[0][1]["latency_ms"]}
    for (_, a), (_, b) in zip(on.reports, off.reports, strict=True):
        assert "latency_ms" in a and "latency_ms" not in b
        assert set(b) == {*LEARNED, "n_params", "epoch_s", "peak_memory_mb"}
        # Timing a real sample in eval mode draws no random numbers: the same training.
        assert {k: a[k] for k in LEARNED} == {k: b[k] for k in LEARNED}


def test_latency_uses_the_eval_models_precision(
    fake_ctx: Any, make_config: Callable[..., dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[torch.dtype] = []
    real = inference_latency_ms

    def spy(model: nn.Module, sample: torch.Tensor, **kwargs: Any) -> float:
        with kwargs["autocast"]():
            seen.append(model(sample).dtype)
        return real(model, sample, **kwargs)

    monkeypatch.setattr(measure_module, "inference_latency_ms", spy)
    config = make_config(epochs=2, data={"max_samples": 100})
    run(make_config(**config, precision={"amp": True, "amp_dtype": "bf16"}), fake_ctx())
    run(config, fake_ctx())
    assert seen == [torch.bfloat16, torch.float32]


class _ScriptedClock:
    """``time.perf_counter`` for inference_latency_ms: each forward pass advances it."""

    def __init__(self, durations: list[float]) -> None:
        self.now = 0.0
        self.durations = iter(durations)

    def perf_counter(self) -> float:
        return self.now

    def forward(self) -> None:
        self.now += next(self.durations)


def test_latency_is_the_median_of_the_timed_passes_after_warmup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two slow warm-up passes, then five timed ones with one outlier.
    clock = _ScriptedClock([9.0, 9.0, 0.004, 0.001, 0.5, 0.002, 0.003])

    class Timed(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            clock.forward()
            assert torch.is_inference_mode_enabled() and not self.training
            return super().forward(x)

    monkeypatch.setattr(measure_module.time, "perf_counter", clock.perf_counter)
    model = Timed(4, 2).train()
    ms = inference_latency_ms(
        model, torch.zeros(1, 4), warmup=2, repeats=5, autocast=contextlib.nullcontext
    )
    assert ms == pytest.approx(3.0)
    assert model.training  # restored


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status")
def test_cpu_peak_memory_is_the_peak_rss_in_mib() -> None:
    def vm_hwm_mib() -> float:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
        raise AssertionError("no VmHWM")

    block = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
    peak = peak_memory_mb(torch.device("cpu"))
    # A wrong unit (bytes or KiB read as MiB) would be off by a factor of 1024.
    assert math.isclose(peak, vm_hwm_mib(), rel_tol=0.05) and peak > 64
    del block


def test_cuda_peak_memory_is_the_allocators_peak_in_mib_since_training_began(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, torch.device]] = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d: calls.append(("reset", d)))
    monkeypatch.setattr(
        torch.cuda, "max_memory_allocated", lambda d: calls.append(("peak", d)) or 3 * 2**20
    )
    cuda = torch.device("cuda", 1)
    measures = measure_module.TrialMeasures(nn.Linear(3, 2), cuda, LatencyConfig(enabled=False))
    assert calls == [("reset", cuda)]  # the batch-size probes' peaks are not the training's
    assert measures.values(1.5) == {"n_params": 8.0, "epoch_s": 1.5, "peak_memory_mb": 3.0}
    assert calls[-1] == ("peak", cuda)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_memory_is_the_devices_and_latency_is_timed_with_amp(
    fake_ctx: Any, make_config: Callable[..., dict]
) -> None:
    ctx = fake_ctx()
    config = make_config(devices={"device": "cuda"}, precision={"amp": True, "amp_dtype": "fp16"})
    run(config, ctx)
    for _, metrics in ctx.reports:
        # Tensors of a 5k-parameter model and batches of 64 8x8 digits: far below the
        # hundreds of MiB the process's RSS (or the CUDA context) would show.
        assert 0 < metrics["peak_memory_mb"] < 64
        assert 0 < metrics["latency_ms"] < 100
