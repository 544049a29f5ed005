"""The deepvisiontools backend for real: ``dvt-hpo run`` of a tiny smp U-Net on a generated
segmentation dataset, every trial its own process, pruning through the control socket, a
batch-size search through deepvisiontools' loader, and a 2-rank torchrun trial (gloo on CPU).

Runs where deepvisiontools is installed (``.venv-dvt``, see ``.ci/run``); skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from dvt_hpo.spec.known_metrics import known_for
from dvt_hpo.studyfile import load_spec
from tests.backends.conftest import ENTRYPOINT, EXAMPLE_DIR, REPO_ROOT, SCHEMA, needs_dvt

pytestmark = [needs_dvt, pytest.mark.processes, pytest.mark.timeout(900)]

LR_GOOD, LR_FROZEN = 3e-3, 0.0
# Training loss after 2 epochs (batch 8): about 0.07 when training, above 0.3 when frozen.
PRUNE_FROZEN = {"kind": "threshold", "upper": 0.2, "n_warmup_steps": 1}
ON_TRAIN_LOSS = {"metric": "train_loss", "direction": "minimize"}


def unet_params(attention: str | None) -> int:
    """The parameter count of the example's U-Net, built by smp itself (no deepvisiontools)."""
    import segmentation_models_pytorch as smp

    model = smp.Unet(
        encoder_name="resnet18",
        encoder_weights=None,
        encoder_depth=3,
        decoder_channels=[64, 32, 16],
        in_channels=3,
        classes=1,
        decoder_attention_type=attention,
    )
    return sum(p.numel() for p in model.parameters())


def write_study(
    folder: Path,
    dataset: Path,
    trainer_config: dict[str, Any],
    *,
    name: str,
    epochs: int,
    search: list[dict[str, Any]],
    **sections: Any,
) -> Path:
    config = {**trainer_config, "epochs": epochs}
    config["data"] = {**config["data"], "train": str(dataset / "train"), "valid": "data/valid"}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data").symlink_to(dataset)  # a relative root: resolved against the study folder
    (folder / "trainer.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    doc: dict[str, Any] = {
        "study": {"name": name, "n_trials": 1},
        "objective": {"metric": "loss", "direction": "minimize", "reduce": "best"},
        "trials": {"launcher": "process", "devices": "cpu", "timeout_s": 300, "stop_grace_s": 5},
        "trainer": {"entrypoint": ENTRYPOINT, "schema": SCHEMA, "config_file": "trainer.yaml"},
        "search_space": search,
    }
    for key, value in sections.items():
        doc[key] = {**doc.get(key, {}), **value}
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def dvt_hpo_run(
    study: Path, cwd: Path, home: Path, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    """``dvt-hpo run`` from ``cwd`` with ``$HOME`` at ``home`` (both watched for litter)."""
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(REPO_ROOT), **extra_env}
    for name in ("XDG_CONFIG_HOME", "XDG_CACHE_HOME", "YOLO_CONFIG_DIR", "MLFLOW_TRACKING_URI"):
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "dvt_hpo", "run", str(study)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def load_study(path: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{path.parent / 'dvt.db'}")


@pytest.fixture
def clean_dirs(tmp_path: Path) -> tuple[Path, Path]:
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    return cwd, home


def test_study_prunes_samples_the_model_and_writes_only_inside_trial_folders(
    tmp_path: Path,
    dataset: Path,
    trainer_config: dict[str, Any],
    clean_dirs: tuple[Path, Path],
) -> None:
    cwd, home = clean_dirs
    config = {**trainer_config, "logging": {"backends": ["mlflow", "tensorboard"]}}
    study_path = write_study(
        tmp_path / "study",
        dataset,
        config,
        name="dvt-e2e",
        epochs=3,
        search=[
            {"name": "lr", "path": "optim.optim_args.lr", "kind": "categorical",
             "choices": [LR_GOOD, LR_FROZEN]},
            {"name": "attention", "path": "model_spec.kwargs.decoder_attention_type",
             "kind": "categorical", "choices": [None, "scse"]},
        ],
        study={"n_trials": 3, "storage": "sqlite:///dvt.db", "sampler": {"kind": "grid", "seed": 0},
               "pruner": PRUNE_FROZEN},
        objective=ON_TRAIN_LOSS,
        batch_size={"auto": True, "path": "data.batch_size", "min": 2, "max": 8},
    )  # fmt: skip
    done = dvt_hpo_run(study_path, cwd, home)
    assert done.returncode == 0, done.stdout + done.stderr

    trials = load_study(study_path, "dvt-e2e").trials
    assert len(trials) == 3
    by_lr: dict[float, list[optuna.trial.FrozenTrial]] = {}
    for trial in trials:
        by_lr.setdefault(trial.params["lr"], []).append(trial)
    # 3 of the 4 grid points: both learning rates occur.
    assert set(by_lr) == {LR_GOOD, LR_FROZEN}
    for trial in by_lr[LR_FROZEN]:
        # Pruned at epoch 1 (n_warmup_steps), and training stopped there: no later report.
        assert trial.state == optuna.trial.TrialState.PRUNED, trial.user_attrs
        assert sorted(trial.intermediate_values) == [0, 1]
        result = json.loads((Path(trial.user_attrs["log_dir"]) / "result.json").read_text())
        assert result["status"] == "pruned" and result["step"] == 1
    for trial in by_lr[LR_GOOD]:
        assert trial.state == optuna.trial.TrialState.COMPLETE, trial.user_attrs
        assert sorted(trial.intermediate_values) == [0, 1, 2]
        assert trial.value == pytest.approx(min(trial.intermediate_values.values()))
        assert trial.value < 0.2
        metrics = json.loads((Path(trial.user_attrs["log_dir"]) / "result.json").read_text())[
            "metrics"
        ]
        # The library's own keys pass through next to ours.
        assert {"valid/f1/macro", "valid/f1/cls1", "valid/loss", "train/loss"} <= set(metrics)
        # macro_f1 counts the background as class 0, as deepvisiontools' f1/macro does when
        # both classes occur in the truth; the foreground variant is the class-1 F1.
        assert metrics["macro_f1"] == pytest.approx(metrics["valid/f1/macro"], abs=1e-6)
        assert metrics["macro_f1_foreground"] == pytest.approx(metrics["valid/f1/cls1"], abs=1e-6)
        assert metrics["epochs_run"] == 3
        # What validate knows ahead is what a trial reports (issue 18, item 1).
        known = known_for(load_spec(study_path))
        assert known is not None
        assert {k for k in metrics if "/" not in k} == known.epoch | known.final
        assert all(k.startswith(known.open_prefixes) for k in metrics if "/" in k)
    for trial in trials:
        # The sampled architecture is the one trained.
        assert trial.user_attrs["n_params"] == unet_params(trial.params["attention"])
        # The batch size was found through deepvisiontools' loader (8 fits on CPU).
        assert trial.user_attrs["batch_size"] == 8
        assert trial.user_attrs["batch_size_probes"] >= 1
        folder = Path(trial.user_attrs["log_dir"])
        assert Path(trial.user_attrs["run_dir"]).is_relative_to(folder)
        # MLflow's store and TensorBoard's events stayed in the trial's folder.
        assert list(folder.rglob("mlflow.db")) and list(folder.rglob("events.out.tfevents*"))
    # Nothing in the current directory, in $HOME, or in the study folder but ours.
    assert list(cwd.iterdir()) == []
    assert list(home.iterdir()) == []
    assert sorted(p.name for p in study_path.parent.iterdir()) == [
        "data",
        "dvt.db",
        "runs",
        "study.yaml",
        "trainer.yaml",
    ]


@pytest.mark.parametrize(("pruner", "state", "steps", "batch_max", "batch", "cap"), [
    (PRUNE_FROZEN, optuna.trial.TrialState.COMPLETE, [0, 1, 2], 4, 4, None),
    # Every trial's training loss is above 0: pruned at epoch 1 (n_warmup_steps). And a
    # batch_size.max the data cannot fill: the search stops at each rank's 8 samples (the
    # probes sample with replacement, so 64 would "fit").
    ({**PRUNE_FROZEN, "upper": 0.0}, optuna.trial.TrialState.PRUNED, [0, 1], 64, 8, 8),
])  # fmt: skip
def test_a_two_rank_torchrun_trial(
    tmp_path: Path,
    dataset: Path,
    trainer_config: dict[str, Any],
    clean_dirs: tuple[Path, Path],
    pruner: dict[str, Any],
    state: optuna.trial.TrialState,
    steps: list[int],
    batch_max: int,
    batch: int,
    cap: int | None,
) -> None:
    cwd, home = clean_dirs
    # smp keeps resnet18's last two stages when encoder_depth is 3: DDP must be told that
    # they get no gradient (deepvisiontools' TrainerConfig.find_unused_parameters).
    config = {**trainer_config, "find_unused_parameters": True}
    study_path = write_study(
        tmp_path / "study",
        dataset,
        config,
        name="dvt-ddp",
        epochs=3,
        search=[{"name": "lr", "path": "optim.optim_args.lr", "kind": "categorical",
                 "choices": [LR_GOOD]}],
        study={"storage": "sqlite:///dvt.db", "sampler": {"kind": "random", "seed": 0},
               "pruner": pruner},
        objective=ON_TRAIN_LOSS,
        trials={"launcher": "torchrun", "nproc_per_node": 2},
        # 8 training samples per rank: 2 steps per epoch, as the single-process trials.
        batch_size={"auto": True, "path": "data.batch_size", "min": 2, "max": batch_max},
    )  # fmt: skip
    done = dvt_hpo_run(study_path, cwd, home)
    assert done.returncode == 0, done.stdout + done.stderr
    (trial,) = load_study(study_path, "dvt-ddp").trials
    assert trial.state == state, trial.user_attrs
    # Both ranks stopped at the chief's epoch: no report after the prune.
    assert sorted(trial.intermediate_values) == steps
    folder = Path(trial.user_attrs["log_dir"])
    # No rank failed: the other rank learnt the decision and left its loop cleanly.
    assert list(folder.glob("error-rank*.json")) == []
    result = json.loads((folder / "result.json").read_text())
    assert result["status"] == ("ok" if state == optuna.trial.TrialState.COMPLETE else "pruned")
    assert trial.user_attrs["n_params"] == unet_params(None)
    # The batch-size search ran on both ranks and agreed (all-reduce MIN).
    assert trial.user_attrs["batch_size"] == batch
    assert trial.user_attrs.get("batch_size_data_cap") == cap
    assert list(home.iterdir()) == [] and list(cwd.iterdir()) == []


def test_the_example_study_tunes_something(
    tmp_path: Path, dataset: Path, clean_dirs: tuple[Path, Path]
) -> None:
    """studies/deepvisiontools as shipped but 4 trials: its best is clearly better than its
    worst (issue 18, item 11; tests/test_examples.py does the CPU examples)."""
    cwd, home = clean_dirs
    folder = tmp_path / "example"
    shutil.copytree(EXAMPLE_DIR, folder, ignore=shutil.ignore_patterns("*.db", "runs", "data"))
    (folder / "data").symlink_to(dataset)  # the demo data its header says to generate
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "dvt_hpo", "run", str(folder / "study.yaml"),
         "--set", "study.n_trials=4"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    study = optuna.load_study(
        study_name="deepvisiontools-unet", storage=f"sqlite:///{folder / 'deepvisiontools.db'}"
    )
    values = [t.value for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(values) >= 2 and max(values) - min(values) >= 0.1, (values, done.stdout)
