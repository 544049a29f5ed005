"""``trials.resume`` with the deepvisiontools backend: a trial stopped (SIGTERM of its worker)
after saving epoch 1 is resumed by its copy from epoch 2 through deepvisiontools'
``Trainer.fit(resume=...)``, and the copy ends with the uninterrupted trial's value and curve,
bit for bit on CPU.

Runs where deepvisiontools is installed (``.venv-dvt``, see ``.ci/run``); skipped elsewhere.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from dvt_hpo.recovery.retries import retry_history
from tests.backends.conftest import REPO_ROOT, needs_dvt
from tests.backends.test_deepvisiontools_study import load_study, write_study

pytestmark = [needs_dvt, pytest.mark.processes, pytest.mark.timeout(900)]

EPOCHS = 4


def study(folder: Path, dataset: Path, config: dict[str, Any], name: str, resume: bool) -> Path:
    return write_study(
        folder,
        dataset,
        config,
        name=name,
        epochs=EPOCHS,
        search=[
            {"name": "lr", "path": "optim.optim_args.lr", "kind": "categorical", "choices": [3e-3]}
        ],
        study={"n_trials": 1, "storage": "sqlite:///dvt.db", "heartbeat_interval_s": 1,
               "grace_period_s": 3},
        trials={"resume": resume, "resume_every_s": 0, "warm": False, "max_retries": 1},
        trainer={"entrypoint": "tests.entrypoints.resumable:dvt"},
    )  # fmt: skip


def env(home: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("DVT_TEST_HOLD")}
    return {**base, "HOME": str(home), "PYTHONPATH": str(REPO_ROOT), **extra}


def run(path: Path, home: Path, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dvt_hpo", "run", str(path)],
        cwd=path.parent,
        env=env(home, **extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_stopped_trial_resumes_through_fit_resume(
    tmp_path: Path, dataset: Path, trainer_config: dict[str, Any]
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    reference_path = study(tmp_path / "reference", dataset, trainer_config, "ref", resume=False)
    done = run(reference_path, home)
    out, err = done.communicate(timeout=600)
    assert done.returncode == 0, out + err
    (reference,) = load_study(reference_path, "ref").trials

    path = study(tmp_path / "resumed", dataset, trainer_config, "resumed", resume=True)
    hold = tmp_path / "held.txt"
    worker = run(path, home, DVT_TEST_HOLD_AT="1", DVT_TEST_HOLD_FILE=str(hold))
    end = time.monotonic() + 300
    while not hold.exists():  # the trial writes it after saving epoch 1
        assert worker.poll() is None, worker.communicate()
        assert time.monotonic() < end, "timed out waiting for the hold"
        time.sleep(0.1)
    checkpoints = path.parent / "runs" / "resumed" / "resume" / "trial-0000" / "state"
    assert [p.name for p in (checkpoints / "checkpoints").iterdir()] == ["checkpoint_epoch0001.pt"]
    worker.send_signal(signal.SIGTERM)
    worker.communicate(timeout=120)

    done = run(path, home)
    out, err = done.communicate(timeout=600)
    assert done.returncode == 0, out + err
    assert "resumes from" in out, out
    first, copy = load_study(path, "resumed").trials
    assert first.state == optuna.trial.TrialState.FAIL
    assert copy.state == optuna.trial.TrialState.COMPLETE, copy.user_attrs
    assert copy.user_attrs["resumed_epochs"] == 2
    assert sorted(copy.intermediate_values) == list(range(EPOCHS))
    # Epochs 0 and 1 are the first attempt's, 2 and 3 the copy's own, trained from the state.
    assert copy.intermediate_values[0] == first.intermediate_values[0]
    assert copy.value == reference.value  # bit for bit on CPU
    assert copy.intermediate_values == reference.intermediate_values
    assert not checkpoints.parent.exists()


def test_a_paused_trial_continues_from_the_state_saved_at_the_pause(
    tmp_path: Path, dataset: Path, trainer_config: dict[str, Any]
) -> None:
    """``trials.pause``: the threshold pruner stops every trial at every epoch (loss above 0),
    so the three trials (the same config) pause after epoch 0; one of them ranks in the top
    third there and continues from the state the backend saved at the pause (its force save),
    trains epoch 1 bit for bit as the never-paused trial did, and pauses again, alone at that
    step: the study is then over and no state is left."""
    home = tmp_path / "home"
    home.mkdir()
    reference_path = study(tmp_path / "reference", dataset, trainer_config, "ref", resume=False)
    done = run(reference_path, home)
    out, err = done.communicate(timeout=600)
    assert done.returncode == 0, out + err
    (reference,) = load_study(reference_path, "ref").trials

    path = study(tmp_path / "paused", dataset, trainer_config, "paused", resume=True)
    doc = yaml.safe_load(path.read_text())
    doc["study"].update(n_trials=3, pruner={"kind": "threshold", "upper": 0.0})
    doc["trials"].update(pause=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    done = run(path, home)
    out, err = done.communicate(timeout=600)
    assert done.returncode == 0, out + err
    trials = load_study(path, "paused").trials
    continued = [t for t in trials if retry_history(t)]
    assert len(continued) == 1, out
    (copy,) = continued
    assert copy.user_attrs["resumed_epochs"] == 1 and copy.user_attrs["redone_epochs"] == 0, out
    assert copy.intermediate_values == {s: reference.intermediate_values[s] for s in (0, 1)}
    assert "the study is over: deleted the paused state of" in out
    assert not any((path.parent / "runs" / "paused" / "resume").iterdir())
