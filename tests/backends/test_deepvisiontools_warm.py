"""Warm starts of deepvisiontools trials: the template imports torch and deepvisiontools once
(the backend's warm-up hook, isolated inside the study's runs folder) and each forked trial
still writes only into its own folder.

Runs where deepvisiontools is installed (``.venv-dvt``, see ``.ci/run``); skipped elsewhere.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from tests.backends.conftest import REPO_ROOT, needs_dvt
from tests.backends.test_deepvisiontools_study import (
    LR_GOOD,
    dvt_hpo_run,
    load_study,
    unet_params,
    write_study,
)

pytestmark = [needs_dvt, pytest.mark.processes, pytest.mark.timeout(600)]

ENTRY_MODULE = "dvt_hpo.backends.deepvisiontools"


def warm_up_alone(folder: Path) -> None:
    """What the template does once (the backend's warm-up hook, in ``folder``), in a fresh
    interpreter: the files a lone import writes."""
    home = folder / "home"
    home.mkdir(parents=True)
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(REPO_ROOT)}
    code = (
        "import sys; from pathlib import Path; "
        f"from {ENTRY_MODULE} import __dvt_hpo_warm__ as hook; hook(Path(sys.argv[1]))"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(folder / ENTRY_MODULE)], env=env, cwd=folder, check=True
    )


# A line of ``python -X importtime`` (PYTHONPROFILEIMPORTTIME): one per module a process
# imports, printed by the process that imports it, on its stderr.
IMPORT_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s+(?P<module>\S+)$", re.M)
HEAVY = {"torch", "torchvision", "deepvisiontools"}


def imported(log: Path) -> set[str]:
    """The modules a process imported, from its ``-X importtime`` lines in ``log``."""
    return {m.group("module").strip() for m in IMPORT_LINE.finditer(log.read_text())}


def files_under(folder: Path) -> dict[str, int]:
    """``{relative path: size}`` of every file under ``folder``."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def test_warm_trials_start_fast_and_write_only_inside_their_folders(
    tmp_path: Path, dataset: Path, trainer_config: dict[str, Any]
) -> None:
    reference = tmp_path / "reference"
    warm_up_alone(reference)

    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    config = {**trainer_config, "logging": {"backends": ["mlflow", "tensorboard"]}}
    study_path = write_study(
        tmp_path / "study",
        dataset,
        config,
        name="dvt-warm",
        epochs=1,
        search=[
            {"name": "lr", "path": "optim.optim_args.lr", "kind": "categorical",
             "choices": [LR_GOOD]},
            {"name": "attention", "path": "model_spec.kwargs.decoder_attention_type",
             "kind": "categorical", "choices": [None, "scse"]},
        ],
        study={"n_trials": 2, "storage": "sqlite:///dvt.db", "sampler": {"kind": "grid"}},
    )  # fmt: skip
    # Every Python process of the run lists the modules it imports on its stderr.
    done = dvt_hpo_run(study_path, cwd, home, PYTHONPROFILEIMPORTTIME="1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warm starts off" not in done.stdout + done.stderr

    trials = load_study(study_path, "dvt-warm").trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 2
    runs = study_path.parent / "runs" / "dvt-warm"
    # The template imported torch and deepvisiontools; no trial imported them again (a forked
    # trial logs only what it imports itself): what a warm start saves, shown by cause.
    missing = HEAVY - imported(runs / "warm-template.log")
    assert not missing, missing
    for trial in trials:
        attrs = trial.user_attrs
        assert attrs["warm_start"] is True
        trial_imports = imported(Path(attrs["log_dir"]) / "stderr.log")
        assert trial_imports and not trial_imports & HEAVY, sorted(trial_imports & HEAVY)
        assert "startup_s" in attrs and "ready_s" in attrs
        assert attrs["n_params"] == unet_params(trial.params["attention"])
        folder = Path(attrs["log_dir"])
        assert folder.parent == runs
        assert Path(attrs["run_dir"]).is_relative_to(folder)
        # MLflow's store, TensorBoard's events and the library's home files are the trial's.
        assert list(folder.rglob("mlflow.db")) and list(folder.rglob("events.out.tfevents*"))

    # Nothing in $HOME, the current directory or the study folder but the study's own files.
    assert list(home.iterdir()) == [] and list(cwd.iterdir()) == []
    # (dvt.db-wal and -shm are SQLite's own, there while the study above is open.)
    sqlite_companions = {"dvt.db-wal", "dvt.db-shm"}
    assert sorted(
        p.name for p in study_path.parent.iterdir() if p.name not in sqlite_companions
    ) == [
        "data",
        "dvt.db",
        "runs",
        "study.yaml",
        "trainer.yaml",
    ]
    assert sorted(p.name for p in runs.iterdir()) == [
        "trial-0000",
        "trial-0001",
        "warm-template",
        "warm-template.log",
    ]
    # The template's folder holds what the import wrote (ultralytics' settings, matplotlib's
    # font cache), the same files a lone import writes: no trial wrote there.
    warmed = files_under(runs / "warm-template" / ENTRY_MODULE)
    assert "home/.config/Ultralytics/settings.json" in warmed
    assert warmed == files_under(reference / ENTRY_MODULE)
