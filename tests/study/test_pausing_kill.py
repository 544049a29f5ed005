"""``trials.pause`` and ``kill -9``: a continuation killed mid-run is handed on exactly as an
interrupted resumed trial is.

The study of tests/study/test_pausing.py (threshold pruner 0.6, the same enqueued lrs): trial 1
(lr 3e-4) pauses after epoch 0 and continues as trial 6 once 6 trials reached epoch 0. Here the
worker (``python -m dvt_hpo run``, its own process group) is killed with SIGKILL while trial 6
runs, after it reported its first own epoch (step 1) and saved a state (``resume_every_s: 0``:
after every epoch). Trial 6 holds there (tests/entrypoints/resumable.py: the built-in trainer
whose ``save_state`` holds after step 1), so the kill never races its training. The next
``dvt-hpo run`` fails the stale trial 6 (heartbeat 1 s, grace 3 s) and its retry copy
(``retry_history`` [1, 6]) resumes from the saved state: its curve and value are bit for bit
those of lr 3e-4 never paused and never killed, and no state outlives the study.

More epochs than test_pausing.py (EPOCHS) so that the copy has epochs of its own to train after
the resumed state: the threshold logic holds, lr 3e-4 stays above 0.6 after epoch 1, the tiny
lrs near 0.02.
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

from dvt_hpo.recovery import retries
from tests.conftest import run_dvt_hpo
from tests.recovery.test_resume import env_with
from tests.study import test_pausing as pausing

# Three studies of real training one after another: more than the suite's 300 s on a loaded machine.
pytestmark = [pytest.mark.processes, pytest.mark.timeout(900)]

LRS = pausing.LRS
EPOCHS = 8
CONTINUATION = len(LRS)  # trial 6 continues paused trial 1


def study_doc(name: str, *, pause: bool) -> dict[str, Any]:
    """test_pausing.py's study, longer, saving every epoch, and failing a dead worker's trial
    within seconds; paused, through the trainer that can hold (the same training)."""
    return pausing.study_doc(
        name,
        pause=pause,
        epochs=EPOCHS,
        study={"heartbeat_interval_s": 1, "grace_period_s": 3},
        trials={"resume_every_s": 0} if pause else {},
        trainer={"entrypoint": "tests.entrypoints.resumable:train"} if pause else {},
    )


def write(tmp: Path, name: str, *, pause: bool) -> Path:
    tmp.mkdir()
    path = tmp / "study.yaml"
    path.write_text(yaml.safe_dump(study_doc(name, pause=pause), sort_keys=False))
    return path


def load(tmp: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp / 'study.db'}")


def running_after_own_epoch(tmp: Path, name: str) -> bool:
    """Trial 6 RUNNING, with its first own epoch (step 1) reported: one snapshot of the DB."""
    # Read the DB only once the worker runs trial 6: opening it earlier races the worker's
    # creation of the schema (Optuna's RDBStorage creates the tables on both sides).
    if not (tmp / "runs" / name / f"trial-{CONTINUATION:04d}").exists():
        return False
    try:
        trials = load(tmp, name).get_trials(deepcopy=False)
    except Exception:  # the study is not created yet, or the DB is locked for a moment
        return False
    if len(trials) <= CONTINUATION:
        return False
    trial = trials[CONTINUATION]
    if trial.state != optuna.trial.TrialState.RUNNING:
        if trial.state.is_finished():
            pytest.fail(
                f"trial {CONTINUATION} finished ({trial.state.name}) before the kill: it did "
                f"not hold (steps seen: {sorted(trial.intermediate_values)})"
            )
        return False
    return 1 in trial.intermediate_values


def test_kill_9_during_a_continuation_hands_it_on_as_resume_does(tmp_path: Path) -> None:
    # The same lr, never paused and never killed.
    ref_dir = tmp_path / "never-paused"
    done = run_dvt_hpo(
        "run",
        write(ref_dir, "never-paused", pause=False),
        cwd=ref_dir,
        env=env_with(),
        timeout_s=400,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (never,) = load(ref_dir, "never-paused").trials
    assert sorted(never.intermediate_values) == list(range(EPOCHS))

    name = "paused"
    tmp = tmp_path / name
    path = write(tmp, name, pause=True)
    held = tmp / "held.txt"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dvt_hpo", "run", str(path)],
        cwd=tmp,
        env=env_with(
            DVT_TEST_HOLD_AT="1",
            DVT_TEST_HOLD_TRIAL=str(CONTINUATION),
            DVT_TEST_HOLD_FILE=str(held),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        end = time.monotonic() + 400
        # Trial 6 holds after saving step 1 (it reported step 1 before): then the worker writes
        # step 1 to the DB. Files and the DB are all a test process can watch.
        while not (held.exists() and running_after_own_epoch(tmp, name)):
            if proc.poll() is not None:
                out, _ = proc.communicate()
                pytest.fail(f"the worker exited {proc.returncode} before the kill:\n{out}")
            if time.monotonic() > end:
                pytest.fail(f"timed out waiting for trial {CONTINUATION} to hold after step 1")
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)
        first_out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert f"trial {CONTINUATION} (continues paused trial 1) resumes from" in first_out, first_out
    killed = load(tmp, name).trials[CONTINUATION]
    assert killed.state.name == "RUNNING"  # nobody marked it: the worker died
    assert retries.retry_history(killed) == [1]
    killed_steps = sorted(killed.intermediate_values)
    assert killed_steps == [0, 1]  # held after its first own epoch

    # Let the heartbeat go stale, then run the study to its end.
    time.sleep(4)
    done = run_dvt_hpo("run", path, cwd=tmp, env=env_with(), timeout_s=400)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    trials = load(tmp, name).trials
    assert trials[CONTINUATION].state.name == "FAIL", out
    copies = [t for t in trials if retries.retry_history(t)[-1:] == [CONTINUATION]]
    assert len(copies) == 1, (out, [(t.number, retries.retry_history(t)) for t in trials])
    (copy,) = copies
    history = retries.retry_history(copy)
    assert 1 in history, history
    assert copy.state.name == "COMPLETE", (out, copy.user_attrs)
    # Bit for bit the never-paused, never-killed trial: the value and every step.
    assert copy.value == never.value, out
    assert copy.intermediate_values == never.intermediate_values, out
    # It resumed from the state trial 6 saved, not from epoch 0 nor from the paused state.
    stderr = (tmp / "runs" / name / f"trial-{copy.number:04d}" / "stderr.log").read_text()
    assert "resuming from the state of trial" in stderr, stderr
    assert "resuming from the state of trial 1 saved after step 0" not in stderr, stderr
    assert copy.user_attrs["resumed_epochs"] >= 2, copy.user_attrs
    # No resume state outlives the study.
    resume = tmp / "runs" / name / "resume"
    assert not resume.exists() or not any(resume.iterdir()), sorted(resume.rglob("*"))
