"""The config a trial ran with, stored once per run's base config and rebuilt exactly."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import optuna

from dvt_hpo.store import trial_config
from dvt_hpo.studyfile import load_spec
from tests.conftest import toy_study


def test_relative_path_fields_are_made_absolute_against_the_trials_folder(tmp_path: Path) -> None:
    config = {
        "output_dir": "out",
        "data": {"root": "data/train", "val_root": "/abs/val"},
        "checkpoint": {"dir": ""},
        "other": "relative/left/alone",
    }
    got = trial_config.absolute_paths(config, tmp_path)
    assert got["output_dir"] == str(tmp_path / "out")
    assert got["data"] == {"root": str(tmp_path / "data" / "train"), "val_root": "/abs/val"}
    assert got["checkpoint"] == {"dir": ""}
    assert got["other"] == "relative/left/alone"
    assert trial_config.absolute_paths({"output_dir": "s3://bucket/x"}, tmp_path) == {
        "output_dir": "s3://bucket/x"
    }


def test_one_record_per_base_config_and_each_trial_rebuilt_with_its_params(
    write_study: Callable[..., Path], unique_name: str, tmp_path: Path
) -> None:
    doc = toy_study(unique_name)
    doc["trainer"]["config"] = {"epochs": 2, "x": 0.0, "data": {"root": "data"}}
    path = write_study(doc)
    spec = load_spec(path, ["trainer.config.epochs=3"])
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, study_name=unique_name)
    study_id = storage.get_study_id_from_name(unique_name)

    key = trial_config.store_base(storage, study_id, spec)
    assert trial_config.store_base(storage, study_id, spec) == key  # stored once
    assert len(key) == 16
    attrs = storage.get_study_system_attrs(study_id)
    records = [k for k in attrs if k.startswith(trial_config.STUDY_PREFIX)]
    assert records == [trial_config.STUDY_PREFIX + key]

    trial = study.ask()
    storage.set_trial_system_attr(trial._trial_id, trial_config.TRIAL_ATTR, key)
    trial.suggest_float("x", 0.0, 1.0)
    study.tell(trial, 1.0)
    (frozen,) = study.trials
    config = trial_config.ran_config(storage, study_id, frozen)
    assert config == {
        "epochs": 3,
        "x": frozen.params["x"],
        "data": {"root": str(tmp_path / "data")},
    }


def test_a_trial_without_a_stored_config_has_none() -> None:
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    study_id = storage.get_study_id_from_name(study.study_name)
    assert trial_config.ran_config(storage, study_id, study.trials[0]) is None
