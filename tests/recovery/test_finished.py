"""A trial that finished while its worker died is recorded as it finished, never run again
(docs/recovery.md, docs/resume.md: "A node lost during a final step").

Unit tests of the decision (:func:`dvt_hpo.recovery.finished.decide`), the race of two
sweepers recording the same trial on SQLite and PostgreSQL, and real workers killed after a
trial's last save: during its final step (command trainer and entry point), after its
process exited with an ok result and before its worker told Optuna.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import optuna
import pytest

from dvt_hpo.optuna_api.private import storage_of, study_id_of, trial_id_of
from dvt_hpo.recovery import finished
from dvt_hpo.recovery.kill_points import ENV_KILL_AT
from dvt_hpo.results.outcome import Objective
from dvt_hpo.spec.model import ConstraintSpec
from dvt_hpo.store.lock import retry_lock
from dvt_hpo.store.storage import rdb_storage
from dvt_hpo.wire.result import TrialResult
from tests.recovery.test_resume import (
    ROOT,
    chain_folder,
    counter_doc,
    env_with,
    expected_curve,
    load,
    run_cli,
    starts,
    wait_for,
    write_doc,
)

OK = TrialResult("ok", metrics={"score": 0.75}, duration_s=1.25, startup_s=0.5)
CURVE = [(0, {"score": 0.5}), (1, {"score": 0.75}), (2, {"score": 0.625})]
MAXIMIZE = Objective("score", "maximize", "best")


def test_an_ok_result_is_recorded_complete_with_the_value_reduced_from_its_curve() -> None:
    decision = finished.decide(OK, [], CURVE, MAXIMIZE)
    assert decision is not None
    assert decision.values == (0.75,)
    assert decision.curve == CURVE
    attrs = decision.attrs
    assert attrs["status"] == "ok" and attrs["epochs_reported"] == 3
    assert attrs["last_step"] == 2 and attrs["last_metrics"] == {"score": 0.625}
    assert attrs["history"] == {"score": [[0, 0.5], [1, 0.75], [2, 0.625]]}
    assert attrs["final_metrics"] == {"score": 0.75} and attrs["startup_s"] == 0.5
    assert attrs["duration_s"] == 1.25 and attrs["recorded_by"] == "sweep"
    last = finished.decide(OK, [], CURVE, Objective("score", "maximize", "last"))
    assert last is not None and last.values == (0.625,)


@pytest.mark.parametrize(
    ("result", "errors", "curve", "objective"),
    [
        (None, [], CURVE, MAXIMIZE),  # no result: killed before it wrote one
        (TrialResult("stopped", signal="SIGTERM"), [], CURVE, MAXIMIZE),
        (TrialResult("error", exc_type="ValueError"), [], CURVE, MAXIMIZE),
        (OK, [TrialResult("error", rank=1)], CURVE, MAXIMIZE),  # another rank failed
        (TrialResult("ok"), [], [], MAXIMIZE),  # the objective was never reported
        (OK, [], [(0, {"score": float("nan")})], MAXIMIZE),  # diverged
        (
            OK,
            [],
            CURVE,
            Objective("score", "maximize", constraints=(ConstraintSpec("mem", "<=", 1.0),)),
        ),  # a constraint metric never reported
    ],
    ids=["no-result", "stopped", "error", "rank-error", "unreported", "diverged", "constraint"],
)
def test_anything_but_a_complete_result_is_left_to_the_retry(
    result: TrialResult | None,
    errors: list[TrialResult],
    curve: list[tuple[int, dict[str, float]]],
    objective: Objective,
) -> None:
    assert finished.decide(result, errors, curve, objective) is None


def test_several_objectives_are_recorded_from_one_epoch() -> None:
    curve = [(0, {"score": 0.5, "ms": 9.0}), (1, {"score": 0.75, "ms": 12.0})]
    objective = Objective("score", "maximize", "best", others=("ms",))
    decision = finished.decide(OK, [], curve, objective)
    assert decision is not None and decision.values == (0.75, 12.0)


@pytest.mark.parametrize("sweepers", [2, 4])
def test_of_sweepers_recording_the_same_trial_at_once_exactly_one_does(
    storage_url: str, unique_name: str, sweepers: int
) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=unique_name, storage=rdb_storage(storage_url, None), direction="maximize"
    )
    trial = study.ask()
    trial.report(0.5, 0)
    frozen = storage_of(study).get_trial(trial_id_of(trial))
    study_id = study_id_of(study)
    decision = finished.decide(OK, [], CURVE, MAXIMIZE)
    assert decision is not None
    barrier = threading.Barrier(sweepers)
    recorded: list[bool] = []

    def sweep() -> None:
        # Each sweeper its own storage (its own connections), as separate workers have.
        storage = rdb_storage(storage_url, None)
        barrier.wait()
        lock = functools.partial(retry_lock, storage_url, study_id)
        recorded.append(
            finished.record(storage, frozen, decision, single_metric="score", lock=lock)
        )

    threads = [threading.Thread(target=sweep) for _ in range(sweepers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(recorded) == [False] * (sweepers - 1) + [True]
    (done,) = optuna.load_study(study_name=unique_name, storage=storage_url).trials
    assert done.state.name == "COMPLETE" and done.value == 0.75
    assert done.intermediate_values == {0: 0.5, 1: 0.75, 2: 0.625}
    assert done.user_attrs["history"] == {"score": [[0, 0.5], [1, 0.75], [2, 0.625]]}


# -- real workers ---------------------------------------------------------------------------

FAST = {"heartbeat_interval_s": 1, "grace_period_s": 2}


def command_doc(name: str, tmp: Path) -> dict[str, Any]:
    """The counter as a command trainer following docs/resume.md (tests/entrypoints/
    cmd_resume.py: saves after every epoch, the last one included)."""
    doc = counter_doc(name, tmp)
    doc["study"].update(FAST)
    doc["trainer"] = {
        "command": [
            "{python}",
            str(ROOT / "tests" / "entrypoints" / "cmd_resume.py"),
            "--x={x}",
            "--resume-dir={resume_dir}",
            "--trial={trial_number}",
            f"--log={tmp / 'starts.txt'}",
        ],
        "config": {"x": 0.5},
    }
    return doc


def killed_in_final_step(path: Path, **env: str) -> None:
    """Run the study until trial 0 holds in its final step, then ``kill -9`` its worker (the
    trial process sees its control socket close and ends its process group)."""
    hold = path.parent / "held.txt"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dvt_hpo", "run", str(path)],
        cwd=path.parent,
        env=env_with(DVT_TEST_HOLD_FILE=str(hold), **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(hold.exists, proc, 120)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)


def assert_completed_as_uninterrupted(path: Path, name: str, tmp: Path) -> None:
    trials = load(path, name).trials
    assert trials[-1].state.name == "COMPLETE", [(t.state, t.user_attrs) for t in trials]
    x = trials[0].params["x"]
    assert trials[-1].value == expected_curve(x, 5)[4]
    assert trials[-1].intermediate_values == expected_curve(x, 5)
    # Epochs 0..4 trained once: the copy started after the last one saved.
    assert starts(tmp) == [(0, 0), (1, 5)], starts(tmp)
    assert trials[-1].user_attrs["resumed_epochs"] == 5
    assert trials[-1].user_attrs["redone_epochs"] == 0
    assert not chain_folder(path, name).exists()


@pytest.mark.processes
def test_a_command_trainer_killed_in_its_final_step_completes_without_training_again(
    tmp_path: Path, unique_name: str
) -> None:
    """The 13-second case: saved after its last epoch, its node lost during its final step.
    The copy resumes past the last epoch, reports nothing, and completes with the chain's
    curve (it used to end FAIL "objective.metric 'score' was never reported")."""
    path = write_doc(tmp_path, command_doc(unique_name, tmp_path))
    killed_in_final_step(path, DVT_TEST_HOLD_AT="final")
    done = run_cli(path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "saved after step 4" in done.stdout or "resumes from" in done.stdout, done.stdout
    assert_completed_as_uninterrupted(path, unique_name, tmp_path)


@pytest.mark.processes
def test_an_entry_point_killed_in_its_final_step_completes_without_training_again(
    tmp_path: Path, unique_name: str
) -> None:
    doc = counter_doc(unique_name, tmp_path, final_hold=str(tmp_path / "held.txt"))
    doc["study"].update(FAST)
    path = write_doc(tmp_path, doc)
    killed_in_final_step(path)
    done = run_cli(path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_completed_as_uninterrupted(path, unique_name, tmp_path)


@pytest.mark.processes
@pytest.mark.parametrize("resume", [True, False], ids=["resume", "no-resume"])
def test_a_trial_whose_worker_died_after_its_ok_result_is_recorded_by_the_sweep(
    tmp_path: Path, unique_name: str, resume: bool
) -> None:
    """Killed after the trial process exited with its result, before anything was recorded:
    the next run's sweep records it COMPLETE from its result and curve, and runs nothing."""
    doc = counter_doc(unique_name, tmp_path)
    doc["study"].update(FAST)
    doc["trials"]["resume"] = resume
    doc["trials"]["keep_logs"] = "all"
    path = write_doc(tmp_path, doc)
    killed = subprocess.run(
        [sys.executable, "-m", "dvt_hpo", "run", str(path)],
        cwd=tmp_path,
        env=env_with(**{ENV_KILL_AT: "trial:ended"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    done = run_cli(path)
    assert done.returncode == 0, done.stdout + done.stderr
    (trial,) = load(path, unique_name).trials
    x = trial.params["x"]
    assert trial.state.name == "COMPLETE" and trial.value == expected_curve(x, 5)[4]
    assert trial.intermediate_values == expected_curve(x, 5)
    assert trial.user_attrs["recorded_by"] == "sweep"
    assert trial.user_attrs["final_metrics"] == {"score": expected_curve(x, 5)[4]}
    assert trial.user_attrs["epochs_reported"] == 5
    assert starts(tmp_path) == [(0, 0)]
    assert not chain_folder(path, unique_name).exists()


@pytest.mark.processes
def test_a_copy_past_its_last_epoch_completes_with_several_objectives(
    tmp_path: Path, unique_name: str
) -> None:
    doc = counter_doc(unique_name, tmp_path, final_hold=str(tmp_path / "held.txt"), cost=True)
    doc["study"].update(FAST)
    doc["objective"] = {
        "metrics": [
            {"name": "score", "direction": "maximize"},
            {"name": "cost", "direction": "minimize"},
        ],
        "reduce": "last",
    }
    path = write_doc(tmp_path, doc)
    killed_in_final_step(path)
    done = run_cli(path)
    assert done.returncode == 0, done.stdout + done.stderr
    first, copy = load(path, unique_name).trials
    assert copy.state.name == "COMPLETE", copy.user_attrs
    assert copy.values == [expected_curve(first.params["x"], 5)[4], 4.0]
    assert [s for s, _ in copy.user_attrs["history"]["score"]] == [0, 1, 2, 3, 4]
    assert starts(tmp_path) == [(0, 0), (1, 5)]
    assert copy.user_attrs["resumed_epochs"] == 5
