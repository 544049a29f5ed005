"""TrainerConfig: strict loading, round trips, YAML errors with lines, overrides, schema helpers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dvt_hpo.exceptions import SpecError
from dvt_hpo.train import apply_overrides
from dvt_hpo.train.config import (
    SchedConfig,
    TrainerConfig,
    WarmupConfig,
    dump_trainer_config,
    load_trainer_config,
)

FULL = {
    "epochs": 3,
    "seed": 7,
    "output_dir": "out",
    "model": {"builder": "mlp", "kwargs": {"width": 64, "depth": 3, "dropout": 0.1}},
    "data": {
        "kind": "synthetic",
        "val_fraction": 0.25,
        "batch_size": 16,
        "image_size": 12,
        "max_samples": 100,
        "synthetic": {"num_samples": 200, "num_classes": 3, "channels": 1},
    },
    "optim": {"target": "torch.optim.SGD", "optim_args": {"lr": 1, "momentum": 0.9}},
    "sched": {
        "target": "torch.optim.lr_scheduler.StepLR",
        "sched_args": {"step_size": 2, "gamma": 0.5},
        "step_on": "step",
        "warmup": {"steps": 10, "start_factor": 0.2},
    },
    "precision": {"amp": True, "amp_dtype": "fp16", "grad_clip": 1, "accumulate_steps": 2},
    "ema": {"enabled": True, "decay": 0.99, "update_every": 2, "warmup_steps": 5},
    "checkpoint": {"monitor": "loss", "mode": "min", "dir": "ck", "keep_last_n": 3},
    "eval": {"latency": {"enabled": False, "warmup": 0, "repeats": 3}},
    "devices": {"device": "cuda:1", "strategy": "ddp", "pin_memory": True},
}


def spec_error(data: Any) -> SpecError:
    with pytest.raises(SpecError) as info:
        TrainerConfig.from_dict(data, source="trainer.yaml")
    return info.value


def test_defaults_round_trip_and_are_plain_data() -> None:
    cfg = TrainerConfig()
    data = cfg.to_dict()
    assert TrainerConfig.from_dict(data) == cfg
    # JSON/YAML types only: a YAML dump and reload is the identity.
    assert yaml.safe_load(yaml.safe_dump(data)) == data
    assert data["optim"] == {
        "target": "torch.optim.AdamW",
        "optim_args": {"lr": 1e-3},
        "weight_decay": 0.0,
    }
    assert data["sched"] is None
    # Latency is measured unless turned off, cheaply (25 batch-1 passes once per run).
    assert data["eval"] == {"latency": {"enabled": True, "warmup": 5, "repeats": 20}}


def test_full_config_round_trips_and_converts_ints_for_floats() -> None:
    cfg = TrainerConfig.from_dict(FULL)
    assert TrainerConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.sched == SchedConfig(
        "torch.optim.lr_scheduler.StepLR",
        {"step_size": 2, "gamma": 0.5},
        "step",
        WarmupConfig(steps=10, start_factor=0.2),
    )
    assert isinstance(cfg.precision.grad_clip, float) and cfg.precision.grad_clip == 1.0
    # Free kwargs keep their YAML type.
    assert cfg.optim.optim_args["lr"] == 1 and isinstance(cfg.optim.optim_args["lr"], int)


def test_unknown_key_names_the_field_and_suggests() -> None:
    err = spec_error({"optim": {"optim_argz": {}}})
    assert err.field == "optim.optim_argz" and err.file == "trainer.yaml"
    assert "did you mean 'optim_args'?" in str(err)
    assert "allowed keys: target, optim_args, weight_decay" in str(err)
    err = spec_error({"epoch": 3})
    assert err.field == "epoch" and "did you mean 'epochs'?" in str(err)
    # A free kwarg put one level too high points at where it belongs.
    err = spec_error({"optim": {"lr": 0.1}})
    assert "did you mean 'optim_args.lr'?" in str(err)


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"epochs": "3"}, "epochs", ["expected int", "'3' (str)"]),
        ({"epochs": True}, "epochs", ["expected int", "True (bool)"]),
        ({"data": {"val_fraction": False}}, "data.val_fraction", ["expected float"]),
        (
            {"precision": {"amp_dtype": "fp8"}},
            "precision.amp_dtype",
            ["'fp16', 'bf16', 'fp32'", "'fp8'"],
        ),
        ({"devices": {"strategy": "dp"}}, "devices.strategy", ["'auto', 'single', 'ddp'"]),
        ({"model": None}, "model", ["not optional"]),
        ({"optim": {"optim_args": {"lr": object()}}}, "optim.optim_args.lr", ["importable target"]),
        ({"optim": {"optim_args": []}}, "optim.optim_args", ["expected a mapping"]),
        ({"optim": {"target": "AdamW"}}, "optim.target", ["importable target", "'AdamW'"]),
        ({"epochs": 0}, "epochs", ["expected >= 1, got 0"]),
        ({"data": {"val_fraction": 1}}, "data.val_fraction", ["0 < val_fraction < 1", "1.0"]),
        ({"data": {"kind": "imagefolder"}}, "data.root", ["needs root"]),
        ({"sched": {"warmup": {}}}, "sched.warmup.steps", ["exactly one of steps and epochs"]),
        ({"devices": {"device": "gpu"}}, "devices.device", ["'cuda:N'", "'gpu'"]),
        (
            {"optim": {"optim_args": {"weight_decay": 0.1}}},
            "optim.optim_args.weight_decay",
            ["optim.weight_decay"],
        ),
        ({"eval": {"latency": {"repeats": 0}}}, "eval.latency.repeats", ["expected >= 1, got 0"]),
        ({"eval": {"latency": {"warmup": -1}}}, "eval.latency.warmup", ["expected >= 0"]),
        ({"eval": {"latency": {"repeat": 5}}}, "eval.latency.repeat", ["did you mean 'repeats'"]),
        ({"eval": {"latency": {"enabled": "no"}}}, "eval.latency.enabled", ["expected bool"]),
        ([1, 2], None, ["expected a mapping"]),
    ],
)
def test_rejections_name_field_value_and_rule(
    data: Any, field: str | None, words: list[str]
) -> None:
    err = spec_error(data)
    assert err.field == field
    for word in words:
        assert word in err.message


def test_optional_section_accepts_null_and_missing_keys_take_defaults() -> None:
    cfg = TrainerConfig.from_dict({"sched": None, "data": {"batch_size": 8}})
    assert cfg.sched is None and cfg.data.batch_size == 8 and cfg.data.kind == "digits"
    cfg = TrainerConfig.from_dict({"sched": {}})
    assert cfg.sched == SchedConfig()


def test_with_values_checks_the_new_values() -> None:
    cfg = TrainerConfig().with_values({"data.batch_size": 32, "precision.accumulate_steps": 2})
    assert (cfg.data.batch_size, cfg.precision.accumulate_steps) == (32, 2)
    with pytest.raises(SpecError, match="expected int"):
        TrainerConfig().with_values({"data.batch_size": 3.5})


def test_yaml_file_errors_carry_the_line(tmp_path: Path) -> None:
    path = tmp_path / "trainer.yaml"
    path.write_text(
        "epochs: 2\noptim:\n  target: torch.optim.SGD\n  optim_args:\n    lr: 0.1\n"
        "  momentun: 0.9\n"
    )
    with pytest.raises(SpecError) as info:
        load_trainer_config(path)
    assert (info.value.file, info.value.line, info.value.field) == (str(path), 6, "optim.momentun")
    assert str(info.value).startswith(f"{path}:6: optim.momentun: unknown key")
    path.write_text("epochs: [\n")
    with pytest.raises(SpecError, match="invalid YAML") as info:
        load_trainer_config(path)
    assert info.value.line is not None


def test_trainer_yaml_reads_numbers_as_yaml_1_2(tmp_path: Path) -> None:
    # PyYAML's YAML 1.1 reads 1e-4 as a string; the study file's loader reads it as a float.
    path = tmp_path / "t.yaml"
    path.write_text("optim:\n  weight_decay: 1e-4\n  optim_args: {lr: 3E-2}\n")
    cfg = load_trainer_config(path)
    assert cfg.optim.weight_decay == 1e-4 and isinstance(cfg.optim.weight_decay, float)
    assert cfg.optim.optim_args == {"lr": 0.03}
    assert load_trainer_config(path, ["optim.weight_decay=2e-4"]).optim.weight_decay == 2e-4


def test_trainer_yaml_overrides_and_errors_name_their_source(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("epochs: 2\ndata:\n  batch_size: 8\n")
    cfg = load_trainer_config(
        path, ["data.batch_size=16", "sched.target=torch.optim.lr_scheduler.StepLR"]
    )
    assert cfg.data.batch_size == 16 and cfg.sched is not None
    with pytest.raises(SpecError) as info:
        load_trainer_config(path, ["data.batch_size=big"])
    assert (info.value.file, info.value.line, info.value.field) == (
        "<--set>",
        None,
        "data.batch_size",
    )
    path.write_text("epochs: 2\ndata:\n  batch_size: many\n")
    with pytest.raises(SpecError) as info:
        load_trainer_config(path, ["epochs=3"])
    assert (info.value.file, info.value.line, info.value.field) == (str(path), 3, "data.batch_size")
    path.write_text("epochs: 2\nepochs: 3\n")
    with pytest.raises(SpecError, match="duplicate key 'epochs'"):
        load_trainer_config(path)


def test_dump_and_load_round_trip(tmp_path: Path) -> None:
    cfg = TrainerConfig.from_dict(FULL)
    path = tmp_path / "sub" / "cfg.yaml"
    dump_trainer_config(cfg, path)
    assert load_trainer_config(path) == cfg
    assert load_trainer_config(_empty(tmp_path)) == TrainerConfig()


def _empty(tmp_path: Path) -> Path:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    return path


def test_overrides_parse_yaml_values_and_reject_unknown_paths() -> None:
    cfg = apply_overrides(
        TrainerConfig(),
        [
            "optim.optim_args.lr=0.05",
            "sched.target=torch.optim.lr_scheduler.StepLR",
            "ema.enabled=true",
        ],
    )
    assert cfg.optim.optim_args == {"lr": 0.05}
    assert cfg.sched is not None and cfg.sched.target.endswith("StepLR") and cfg.ema.enabled
    with pytest.raises(SpecError, match="did you mean 'epochs'") as info:
        apply_overrides(TrainerConfig(), ["epoch=3"])
    assert (info.value.file, info.value.field) == ("<--set>", "epoch")
    with pytest.raises(SpecError, match="expected PATH=VALUE such as epochs=3"):
        apply_overrides(TrainerConfig(), ["epochs"])
    with pytest.raises(SpecError, match="expected int") as info:
        apply_overrides(TrainerConfig(), ["data.batch_size=big"])
    assert info.value.field == "data.batch_size"


@pytest.mark.processes
def test_importing_the_package_and_config_does_not_import_torch() -> None:
    code = (
        "import sys, dvt_hpo.train, dvt_hpo.train.config, dvt_hpo.config.schema; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
