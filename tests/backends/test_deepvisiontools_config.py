"""The deepvisiontools backend's torch-free parts: its schema at ``dvt-hpo validate`` time, the
output isolation, the scoring, and the import boundary (the core never imports the backend,
the backend's package imports neither torch nor deepvisiontools)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dvt_hpo.backends.deepvisiontools import BackendConfig, isolation
from dvt_hpo.backends.deepvisiontools.demo_data import write_dataset
from dvt_hpo.backends.deepvisiontools.scoring import (
    confusion_metrics,
    epoch_metrics,
    library_metrics,
)
from dvt_hpo.config.schema import from_mapping
from dvt_hpo.exceptions import SpecError
from dvt_hpo.run.preflight import load_runnable
from dvt_hpo.studyfile import load_spec
from tests.backends.conftest import ENTRYPOINT, EXAMPLE_DIR, REPO_ROOT, SCHEMA


def study(
    tmp_path: Path, config: dict[str, Any], search: list[dict[str, Any]], **extra: Any
) -> Path:
    (tmp_path / "trainer.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    doc = {
        "study": {"name": "dvt", "n_trials": 2},
        "objective": {"metric": "macro_f1", "direction": "maximize"},
        "trainer": {"entrypoint": ENTRYPOINT, "schema": SCHEMA, "config_file": "trainer.yaml"},
        "search_space": search,
        **extra,
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


LR = {"name": "lr", "path": "optim.optim_args.lr", "kind": "float", "low": 1e-4, "high": 1e-2}


def test_the_example_study_validates() -> None:
    spec = load_spec(EXAMPLE_DIR / "study.yaml")
    assert spec.trainer.entrypoint == ENTRYPOINT
    assert spec.trainer.config["data"]["batch_size"] == 4
    # Normalized with the schema: defaults of deepvisiontools' TrainerConfig filled in.
    assert spec.trainer.config["ema"]["decay"] == 0.995


@pytest.mark.parametrize(
    ("dimension", "message"),
    [
        ({**LR, "path": "optim.lr"}, "did you mean 'optim_args.lr'"),
        ({**LR, "path": "precision.amp_dtype"}, "takes one of 'fp16', 'bf16', 'fp32'"),
        (
            {"name": "p", "path": "normalization.policy", "kind": "categorical",
             "choices": ["auto", "sync"]},
            "normalization.policy takes one of",
        ),
        ({**LR, "path": "epochs", "kind": "int", "low": 0, "high": 3}, "epochs: must be >= 1"),
        ({**LR, "path": "devices.strategy"}, "devices.strategy takes one of"),
    ],
)  # fmt: skip
def test_search_paths_are_checked_against_trainer_config_fields(
    tmp_path: Path, trainer_config: dict[str, Any], dimension: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(study(tmp_path, trainer_config, [dimension]))
    assert message in str(info.value)
    assert "search_space" in str(info.value)


def test_model_kwargs_and_optimizer_args_are_free_paths(
    tmp_path: Path, trainer_config: dict[str, Any]
) -> None:
    spec = load_spec(
        study(
            tmp_path,
            trainer_config,
            [
                LR,
                {"name": "att", "path": "model_spec.kwargs.decoder_attention_type",
                 "kind": "categorical", "choices": [None, "scse"]},
            ],
        )
    )  # fmt: skip
    assert [d.path for d in spec.search_space] == [
        "optim.optim_args.lr",
        "model_spec.kwargs.decoder_attention_type",
    ]


def test_bad_trainer_yaml_names_file_line_and_field(
    tmp_path: Path, trainer_config: dict[str, Any]
) -> None:
    trainer_config["precision"] = {"amp": False, "amp_dtype": "fp8"}
    with pytest.raises(SpecError) as info:
        load_spec(study(tmp_path, trainer_config, [LR]))
    error = info.value
    assert error.file is not None and error.file.endswith("trainer.yaml")
    assert error.line is not None
    assert "amp_dtype" in str(error) and "'fp8'" in str(error)


def test_its_own_optuna_block_is_refused_with_the_way_out(
    tmp_path: Path, trainer_config: dict[str, Any]
) -> None:
    trainer_config["optuna"] = {"n_trials": 5, "search_space": []}
    with pytest.raises(SpecError, match="move its search_space entries"):
        load_spec(study(tmp_path, trainer_config, [LR]))


def test_batch_size_path_must_be_an_integer_field(
    tmp_path: Path, trainer_config: dict[str, Any]
) -> None:
    bad = {"auto": True, "path": "data.train", "min": 2, "max": 8}
    with pytest.raises(SpecError, match="must be an integer field"):
        load_spec(study(tmp_path, trainer_config, [LR], batch_size=bad))
    good = {"auto": True, "path": "data.batch_size", "min": 2, "max": 8}
    assert load_spec(study(tmp_path, trainer_config, [LR], batch_size=good)).batch_size.auto


def test_schema_requires_model_optimizer_data_and_settings(trainer_config: dict[str, Any]) -> None:
    for key in ("model_spec", "optim", "data", "settings"):
        config = dict(trainer_config)
        del config[key]
        with pytest.raises(SpecError, match=f"missing required key '{key}'"):
            from_mapping(BackendConfig, config)


# -- the metrics a trial reports, checked before training (issue 18, item 1) -------------------


def objective_check(tmp_path: Path, config: dict[str, Any], objective: dict[str, Any]) -> Path:
    path = study(tmp_path, config, [LR])
    doc = yaml.safe_load(path.read_text())
    doc["objective"] = objective
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("objective", "edit", "message"),
    [
        ({"metric": "macro_f2", "direction": "maximize"}, {}, "did you mean 'macro_f1'"),
        ({"metric": "loss"}, {"data": {"valid": None}}, "give trainer.config.data.valid"),
        (
            {"metric": "macro_f1"},
            {"settings": {"task": "instance_mask"}},
            "confusion matrix of task semantic_mask, not instance_mask",
        ),
        (
            {"metric": "loss", "constraints": [{"metric": "nparams", "max": 1e6}]},
            {},
            "did you mean 'n_params'",
        ),
    ],
)
def test_a_metric_the_backend_never_reports_is_refused(
    tmp_path: Path,
    trainer_config: dict[str, Any],
    objective: dict[str, Any],
    edit: dict[str, Any],
    message: str,
) -> None:
    for section, values in edit.items():
        trainer_config[section] = {**trainer_config[section], **values}
    path = objective_check(tmp_path, trainer_config, objective)
    load_spec(path)  # the file itself is valid: what the trainer reports is a runnable check
    with pytest.raises(SpecError) as info:
        load_runnable(path)
    assert "the deepvisiontools backend" in info.value.message and message in info.value.message
    assert info.value.field is not None and info.value.field.startswith("objective.")


@pytest.mark.parametrize("metric", ["macro_f1_foreground", "valid/iou/cls1", "train/loss"])
def test_ours_and_the_library_names_are_accepted(
    tmp_path: Path, trainer_config: dict[str, Any], metric: str
) -> None:
    path = objective_check(tmp_path, trainer_config, {"metric": metric, "direction": "maximize"})
    assert load_runnable(path).objective.metric == metric


# -- isolation --------------------------------------------------------------------------------


def test_environment_points_into_the_trial_folder(tmp_path: Path) -> None:
    folders = isolation.TrialFolders.under(tmp_path / "trial")
    env = {"HOME": "/home/someone", "PATH": "/bin"}
    isolation.isolated_env(folders, env)
    for name in ("HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "YOLO_CONFIG_DIR", "MPLCONFIGDIR"):
        assert Path(env[name]).is_relative_to(folders.root), name
    assert env["MLFLOW_TRACKING_URI"].startswith(f"sqlite:///{folders.run}")
    # Pretrained weights stay in the user's cache: read, not downloaded again per trial.
    assert env["TORCH_HOME"] == "/home/someone/.cache/torch"
    assert env["PATH"] == "/bin"


def test_the_config_folders_exist_before_the_libraries_are_imported(tmp_path: Path) -> None:
    folders = isolation.TrialFolders.under(tmp_path / "trial")
    env = {"HOME": "/home/someone"}
    isolation.isolated_env(folders, env)
    folders.create()
    # ultralytics falls back to /tmp/Ultralytics when $YOLO_CONFIG_DIR is not a folder.
    assert Path(env["YOLO_CONFIG_DIR"]).is_dir()
    assert Path(env["XDG_CONFIG_HOME"]).is_dir()


def test_a_team_mlflow_server_is_kept(tmp_path: Path) -> None:
    folders = isolation.TrialFolders.under(tmp_path)
    env = {"HOME": str(tmp_path), "MLFLOW_TRACKING_URI": "http://mlflow:5000"}
    isolation.isolated_env(folders, env)
    assert env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
    config: dict[str, Any] = {"logging": {"mlflow": {}}}
    isolation.output_overrides(config, folders, env)
    assert config["logging"]["mlflow"]["tracking_uri"] == "http://mlflow:5000"
    assert config["output_dir"] == str(folders.run)
    assert config["logging"]["mlflow"]["store_dir"] == str(folders.run)


# -- scoring ----------------------------------------------------------------------------------


def test_macro_f1_counts_background_and_foreground_variant_does_not() -> None:
    # rows = truth, columns = prediction; class 0 is the background.
    matrix = [[90, 10, 0], [5, 15, 0], [0, 0, 0]]
    out = confusion_metrics(matrix)
    f1_bg = 2 * 90 / (2 * 90 + 5 + 10)
    f1_1 = 2 * 15 / (2 * 15 + 10 + 5)
    # Class 2 appears nowhere: F1 0 and still in the mean (scikit-learn's labels=range(C)).
    assert out["macro_f1"] == pytest.approx((f1_bg + f1_1 + 0.0) / 3)
    assert out["macro_f1_foreground"] == pytest.approx((f1_1 + 0.0) / 2)
    assert out["accuracy"] == pytest.approx(105 / 120)


def test_library_keys_pass_through_and_losses_flatten() -> None:
    losses = {"valid/loss": {"loss": 0.5}, "train/loss": {"loss": 0.7, "dice": 0.2}}
    metrics = {"valid/f1/macro": 0.8, "valid/iou/cls1": 0.6, "note": "text"}
    flat = library_metrics(losses, metrics)
    assert flat == {
        "valid/loss": 0.5,
        "train/loss/loss": 0.7,
        "train/loss/dice": 0.2,
        "valid/f1/macro": 0.8,
        "valid/iou/cls1": 0.6,
    }
    out = epoch_metrics(losses, metrics, [[3, 1], [1, 3]])
    assert out["loss"] == 0.5 and out["train_loss"] == 0.7
    assert out["macro_f1"] == pytest.approx(0.75)
    assert epoch_metrics(losses, metrics, [[0, 0], [0, 0]]).get("macro_f1") is None


# -- demo data ----------------------------------------------------------------------------------


def test_demo_dataset_layout_and_determinism(tmp_path: Path) -> None:
    from PIL import Image

    a = write_dataset(tmp_path / "a", classes=2, n_train=3, n_valid=2, seed=1)
    b = write_dataset(tmp_path / "b", classes=2, n_train=3, n_valid=2, seed=1)
    names = sorted(p.name for p in (a / "train" / "images").iterdir())
    assert names == sorted(p.name for p in (a / "train" / "masks").iterdir())
    assert len(names) == 3 and len(list((a / "valid" / "images").iterdir())) == 2
    mask = Image.open(a / "train" / "masks" / names[0])
    assert mask.mode == "L" and mask.getextrema()[1] <= 2
    assert (a / "train" / "masks" / names[0]).read_bytes() == (
        b / "train" / "masks" / names[0]
    ).read_bytes()


# -- import boundary ------------------------------------------------------------------------------


def test_backend_package_imports_neither_torch_nor_deepvisiontools() -> None:
    code = (
        "import sys; import dvt_hpo.backends.deepvisiontools as b; "
        "from dvt_hpo.studyfile import load_spec; "
        f"load_spec({str(EXAMPLE_DIR / 'study.yaml')!r}); "
        "heavy = [m for m in ('torch', 'deepvisiontools') if m in sys.modules]; "
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_core_never_imports_a_backend() -> None:
    imports = re.compile(r"^\s*(from|import)\s+dvt_hpo\.backends|import_module\(.*backends", re.M)
    core = [p for p in (REPO_ROOT / "dvt_hpo").rglob("*.py") if "backends" not in p.parts]
    assert core
    assert [str(p) for p in core if imports.search(p.read_text())] == []
