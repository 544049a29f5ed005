"""The built-in trainer, in process on tiny digits/synthetic data with a fake trial context."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from sklearn.metrics import f1_score
from torch import nn

from dvt_hpo.exceptions import SpecError, TrialPruned
from dvt_hpo.train import run, train_file
from dvt_hpo.train.builtin import build_optimizer, build_scheduler, make_fits
from dvt_hpo.train.config import DataConfig, ModelConfig, TrainerConfig
from dvt_hpo.train.data import build_data
from dvt_hpo.train.measure import MEASURED_METRICS
from dvt_hpo.train.models import build_model, register_model

KEYS = {"loss", "train_loss", "accuracy", "macro_f1", *MEASURED_METRICS}


def test_two_digit_epochs_report_and_learn(fake_ctx: Any, make_config: Callable[..., dict]) -> None:
    ctx = fake_ctx()
    result = run(make_config(), ctx)
    assert [step for step, _ in ctx.reports] == [0, 1]
    for _, metrics in ctx.reports:
        assert set(metrics) == KEYS and all(math.isfinite(v) for v in metrics.values())
    assert ctx.reports[1][1]["accuracy"] > 0.8 and ctx.reports[1][1]["macro_f1"] > 0.8
    assert ctx.reports[1][1]["loss"] < ctx.reports[0][1]["loss"]
    assert result == {**ctx.reports[1][1], "epochs_run": 2.0}
    # The search is capped at the training samples (1438 of digits' 1797, val_fraction 0.2).
    assert ctx.search_calls == [{"device": "cpu", "agree": None, "samples": 1438}]


def test_reported_metrics_match_sklearn_on_the_checkpointed_model(
    fake_ctx: Any, make_config: Callable[..., dict], tmp_path: Path
) -> None:
    config = make_config(
        epochs=1,
        data={"max_samples": 300},
        checkpoint={"enable_checkpointing": True, "dir": str(tmp_path)},
    )
    ctx = fake_ctx()
    run(config, ctx)
    reported = ctx.reports[-1][1]
    macro, accuracy, loss = evaluate_checkpoint(tmp_path / "last.pt")
    assert reported["macro_f1"] == pytest.approx(macro, abs=1e-12)
    assert reported["accuracy"] == pytest.approx(accuracy, abs=1e-12)
    assert reported["loss"] == pytest.approx(loss, rel=1e-5)


def evaluate_checkpoint(path: Path) -> tuple[float, float, float]:
    """Macro-F1, accuracy and mean loss of a checkpoint's model on the full validation set."""
    state = torch.load(path, weights_only=False)
    cfg = TrainerConfig.from_dict(state["config"])
    data = build_data(cfg.data, cfg.seed)
    model = build_model(cfg.model, data.in_shape, data.num_classes)
    model.load_state_dict(state["model"])
    model.eval()
    xs = torch.stack([data.val[i][0] for i in range(len(data.val))])
    ys = torch.stack([data.val[i][1] for i in range(len(data.val))])
    with torch.no_grad():
        logits = model(xs)
    pred = logits.argmax(1)
    macro = f1_score(ys, pred, average="macro", labels=list(range(data.num_classes)))
    loss = float(torch.nn.functional.cross_entropy(logits.double(), ys))
    return float(macro), int((pred == ys).sum()) / len(ys), loss


def test_amp_bf16_on_cpu(fake_ctx: Any, make_config: Callable[..., dict]) -> None:
    ctx = fake_ctx()
    result = run(make_config(precision={"amp": True, "amp_dtype": "bf16"}), ctx)
    assert len(ctx.reports) == 2 and result["accuracy"] > 0.7


def test_ema_warmup_schedule_accumulation_and_clipping(
    fake_ctx: Any, make_config: Callable[..., dict]
) -> None:
    config = make_config(
        epochs=3,
        data={"batch_size": 32},
        sched={
            "target": "torch.optim.lr_scheduler.CosineAnnealingLR",
            "step_on": "step",
            "warmup": {"epochs": 1},
        },
        precision={"grad_clip": 1.0, "accumulate_steps": 2},
        ema={"enabled": True, "decay": 0.9, "update_every": 2, "warmup_steps": 4},
    )
    ctx = fake_ctx()
    result = run(config, ctx)
    assert len(ctx.reports) == 3 and result["accuracy"] > 0.7


def test_scheduler_warmup_then_cosine() -> None:
    model = nn.Linear(2, 2)
    cfg = TrainerConfig.from_dict(
        {
            "optim": {"optim_args": {"lr": 1.0}},
            "sched": {"step_on": "step", "warmup": {"steps": 4, "start_factor": 0.2}},
        }
    )
    optimizer = build_optimizer(cfg.optim, model.parameters())
    scheduler = build_scheduler(cfg.sched, optimizer, epochs=2, steps_per_epoch=6)
    lrs = []
    for _ in range(12):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[:5] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    # Cosine over the 8 steps after the warm-up (T_max filled in), decreasing towards 0.
    assert all(a > b for a, b in itertools.pairwise(lrs[4:]))
    assert lrs[-1] == pytest.approx(0.5 * (1 + math.cos(math.pi * 7 / 8)))


def test_scheduler_rejections() -> None:
    model = nn.Linear(2, 2)
    optimizer = build_optimizer(TrainerConfig().optim, model.parameters())
    bad = TrainerConfig.from_dict({"sched": {"warmup": {"steps": 3}}}).sched
    with pytest.raises(SpecError, match="needs step_on: step") as info:
        build_scheduler(bad, optimizer, epochs=2, steps_per_epoch=3)
    assert info.value.field == "sched.warmup.steps"
    bad = TrainerConfig.from_dict({"sched": {"target": "torch.optim.lr_scheduler.StepLR"}}).sched
    with pytest.raises(SpecError, match="rejected its arguments") as info:
        build_scheduler(bad, optimizer, epochs=2, steps_per_epoch=3)
    assert info.value.field == "sched.sched_args"


def test_optimizer_target_and_args_are_checked() -> None:
    params = list(nn.Linear(2, 2).parameters())
    cfg = TrainerConfig.from_dict(
        {"optim": {"target": "torch.optim.SGD", "optim_args": {"lr": 0.1}, "weight_decay": 0.01}}
    )
    optimizer = build_optimizer(cfg.optim, params)
    assert (
        isinstance(optimizer, torch.optim.SGD) and optimizer.param_groups[0]["weight_decay"] == 0.01
    )
    for optim, field, words in [
        ({"target": "torch.nn.Linear"}, "optim.target", "not a torch.optim.Optimizer"),
        ({"target": "torch.optim.NoSuch"}, "optim.target", "cannot import"),
        (
            {"optim_args": {"lr": 0.1, "momentun": 0.9}},
            "optim.optim_args",
            "rejected its arguments",
        ),
    ]:
        with pytest.raises(SpecError, match=words) as info:
            build_optimizer(TrainerConfig.from_dict({"optim": optim}).optim, params)
        assert info.value.field == field


def test_checkpoints_written_when_enabled(
    fake_ctx: Any, make_config: Callable[..., dict], tmp_path: Path
) -> None:
    config = make_config(
        epochs=3,
        output_dir=str(tmp_path / "run"),
        data={"max_samples": 200},
        checkpoint={"enable_checkpointing": True, "save_every_n_epochs": 1, "keep_last_n": 2},
    )
    run(config, fake_ctx())
    folder = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == [
        "best.pt",
        "epoch-0001.pt",
        "epoch-0002.pt",
        "last.pt",
    ]
    last = torch.load(folder / "last.pt", weights_only=False)
    assert last["epoch"] == 2 and set(last["metrics"]) == KEYS
    assert last["config"]["checkpoint"]["enable_checkpointing"] is True
    best = torch.load(folder / "best.pt", weights_only=False)
    assert best["metrics"]["macro_f1"] == max(
        torch.load(folder / name, weights_only=False)["metrics"]["macro_f1"]
        for name in ("last.pt", "best.pt")
    )


def test_no_files_when_checkpointing_is_off(
    fake_ctx: Any, make_config: Callable[..., dict], tmp_path: Path
) -> None:
    config = make_config(epochs=1, output_dir=str(tmp_path / "run"), data={"max_samples": 100})
    run(config, fake_ctx())
    assert list(tmp_path.iterdir()) == []


def test_unknown_monitor_is_rejected_before_training(
    fake_ctx: Any, make_config: Callable[..., dict], tmp_path: Path
) -> None:
    ctx = fake_ctx()
    config = make_config(
        checkpoint={"enable_checkpointing": True, "monitor": "f1", "dir": str(tmp_path)}
    )
    with pytest.raises(SpecError, match="monitor 'f1' is not a metric") as info:
        run(config, ctx)
    assert info.value.field == "checkpoint.monitor" and ctx.reports == []


def test_pruning_stops_training(fake_ctx: Any, make_config: Callable[..., dict]) -> None:
    ctx = fake_ctx(prune_at=0)
    with pytest.raises(TrialPruned):
        run(make_config(epochs=5, data={"max_samples": 100}), ctx)
    assert len(ctx.reports) == 1


def test_synthetic_mlp_trains(fake_ctx: Any, make_config: Callable[..., dict]) -> None:
    config = make_config(
        model={"builder": "mlp", "kwargs": {"width": 32}},
        data={
            "kind": "synthetic",
            "batch_size": 16,
            "image_size": 8,
            "synthetic": {"num_samples": 256, "num_classes": 4, "channels": 1},
        },
    )
    result = run(config, fake_ctx())
    assert result["accuracy"] > 0.8


# --- batch-size probing --------------------------------------------------------------------


def test_make_fits_runs_real_steps_on_cpu() -> None:
    cfg = TrainerConfig.from_dict({"ema": {"enabled": True}, "precision": {"grad_clip": 1.0}})
    fits = make_fits(cfg, (1, 8, 8), 10, torch.device("cpu"))
    assert fits(4) is True and fits(64) is True


@register_model("test-alloc-limit")
def alloc_limited(in_shape: tuple[int, ...], num_classes: int, *, limit: int = 48) -> nn.Module:
    """A linear model whose forward fails like the CPU allocator above ``limit`` samples."""

    class Limited(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(math.prod(in_shape), num_classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            activations = x.flatten(1)  # held by this frame when it raises
            if x.shape[0] > limit:
                raise RuntimeError(
                    "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate "
                    f"memory: you tried to allocate {activations.numel() * 4000} bytes."
                )
            return self.linear(activations)

    return Limited()


def test_make_fits_lets_oom_propagate_with_frames_cleared() -> None:
    cfg = TrainerConfig.from_dict({"model": {"builder": "test-alloc-limit"}})
    fits = make_fits(cfg, (1, 8, 8), 10, torch.device("cpu"))
    # A probe of n runs n + ceil(5% of n) samples: 45 + 3 = 48 fit, 46 + 3 = 49 do not.
    assert fits(45) is True
    with pytest.raises(RuntimeError, match="DefaultCPUAllocator") as info:
        fits(46)
    frames = []
    tb = info.value.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    forward = [f for f in frames if f.f_code.co_name == "forward"]
    assert forward and all(not f.f_locals for f in forward)
    assert all("inputs" not in f.f_locals or f.f_locals["inputs"] is None for f in frames)


def test_search_uses_fits_and_the_trainer_applies_the_choice(
    fake_ctx: Any, make_config: Callable[..., dict], tmp_path: Path
) -> None:
    ctx = fake_ctx(search={"low": 8, "high": 256, "tolerance": 0.0}, effective=120)
    config = make_config(
        epochs=1,
        model={"builder": "test-alloc-limit", "kwargs": {"limit": 50}},
        data={"max_samples": 200},
        checkpoint={"enable_checkpointing": True, "dir": str(tmp_path)},
    )
    run(config, ctx)
    assert ctx.search_result.size == 47  # probed with 47 + 3 = 50 samples (5% headroom)
    assert any(not p.fits and p.oom for p in ctx.search_result.probes)
    used = torch.load(tmp_path / "last.pt", weights_only=False)["config"]
    # effective 120 over a found 47: 3 accumulated steps of 40.
    assert (used["data"]["batch_size"], used["precision"]["accumulate_steps"]) == (40, 3)


def test_other_errors_in_fits_are_not_out_of_memory(
    fake_ctx: Any, make_config: Callable[..., dict]
) -> None:
    def wrap(fits: Callable[[int], Any]) -> Callable[[int], Any]:
        def shape_bug(n: int) -> Any:
            if n > 16:
                raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (16x64 and 32x10)")
            return fits(n)

        return shape_bug

    ctx = fake_ctx(search={"low": 8, "high": 64}, wrap_fits=wrap)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        run(make_config(epochs=1, data={"max_samples": 100}), ctx)
    assert ctx.reports == []


# --- dvt-hpo train ---------------------------------------------------------------------------


def test_train_file_prints_epochs_and_applies_overrides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "trainer.yaml"
    path.write_text(
        f"epochs: 3\noutput_dir: {tmp_path / 'out'}\nmodel: {{builder: mlp}}\n"
        "data: {max_samples: 200}\ndevices: {device: cpu}\n"
    )
    result = train_file(path, ["epochs=2", "checkpoint.enable_checkpointing=false"])
    out = capsys.readouterr().out.splitlines()
    lines = [line for line in out if line.startswith("epoch ")]
    assert len(lines) == 2 and result["epochs_run"] == 2.0
    # One summary line closes it (issue 18, item 7).
    assert out[-1].startswith("done: best epoch ") and out[-1].endswith(
        "(checkpoint.monitor, max); no checkpoint (checkpoint.enable_checkpointing: false)"
    ), out
    assert all(f" {key}=" in line for line in lines for key in MEASURED_METRICS)
    assert not (tmp_path / "out").exists()


def test_model_and_data_helpers_agree_on_shapes() -> None:
    data = build_data(DataConfig(kind="synthetic", image_size=5), 0)
    model = build_model(ModelConfig("cnn"), data.in_shape, data.num_classes)
    assert model(data.train[0][0].unsqueeze(0)).shape == (1, 10)


def test_real_local_context_search_sets_batch_and_accumulation(
    make_config: Callable[..., dict], tmp_path: Path
) -> None:
    from dvt_hpo.trial.context import LocalContext

    ctx = LocalContext(batch_size={"auto": True, "min": 8, "max": 32, "effective": 64})
    config = make_config(
        epochs=1,
        data={"max_samples": 200},
        checkpoint={"enable_checkpointing": True, "dir": str(tmp_path)},
    )
    run(config, ctx)
    used = torch.load(tmp_path / "last.pt", weights_only=False)["config"]
    assert (used["data"]["batch_size"], used["precision"]["accumulate_steps"]) == (32, 2)
