"""``trials.resume`` on the real single-node Slurm cluster and PostgreSQL: a worker
``scancel``ed, or preempted, while its trial runs has that trial resumed by the next worker,
with the epochs saved before the interruption not trained again; with ``trials.pause``, a trial
paused by a worker that ``dvt-hpo cancel`` stopped is continued by the next worker.

The entry point (tests/entrypoints/resumable.py ``counter``) holds trial 0 after it saved
epoch 1, so the interruption lands at a known epoch; each attempt logs the epoch it started
at. ``trials.runs_dir`` is under the test's folder, which the node shares with this process
(the rule on a cluster: a folder every node sees).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import optuna
import pytest

from dvt_hpo.recovery.retries import retried_trial_number, retry_history
from tests.cluster.conftest import (
    cluster_study,
    preempt,
    submit,
    wait_job_done,
    wait_until,
    write_yaml,
)
from tests.conftest import run_dvt_hpo

pytestmark = pytest.mark.processes

EPOCHS = 4


def resume_study(name: str, url: str, tmp: Path, **cluster: Any) -> dict[str, Any]:
    doc = cluster_study(
        name,
        url,
        study={"n_trials": 1},
        objective={"metric": "score", "direction": "maximize", "reduce": "last"},
        trials={"max_retries": 3, "resume": True, "resume_every_s": 0, "warm": False},
        trainer={
            "entrypoint": "tests.entrypoints.resumable:counter",
            "config": {
                "epochs": EPOCHS,
                "log": str(tmp / "starts.txt"),
                "hold": {"at": 1, "file": str(tmp / "held.txt")},
            },
        },
        cluster=cluster,
    )
    return doc


def starts(tmp: Path) -> list[tuple[int, int]]:
    words = (tmp / "starts.txt").read_text().split()
    return [(int(a), int(b)) for a, b in zip(words[::2], words[1::2], strict=True)]


def check_resumed(url: str, name: str, tmp: Path) -> optuna.trial.FrozenTrial:
    trials = optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)
    first = next(t for t in trials if t.number == 0)
    assert first.state == optuna.trial.TrialState.FAIL
    assert first.user_attrs["reason"].startswith("interrupted")
    (copy,) = [t for t in trials if retried_trial_number(t) == 0]
    assert copy.state == optuna.trial.TrialState.COMPLETE, copy.user_attrs
    # Epochs 0 and 1 were saved before the interruption: the copy starts at 2.
    assert starts(tmp) == [(0, 0), (copy.number, 2)]
    assert copy.user_attrs["resumed_epochs"] == 2
    value, curve = 0.0, {}
    for epoch in range(EPOCHS):
        value = value * 0.5 + first.params["x"]
        curve[epoch] = value
    assert copy.intermediate_values == curve
    assert not (tmp / "runs" / name / "resume" / "trial-0000").exists()
    return copy


def test_a_cancelled_worker_s_trial_is_resumed_by_the_next_worker(
    slurm_cluster: int, postgres_url: str, unique_name: str, tmp_path: Path
) -> None:
    path = write_yaml(
        tmp_path / "study.yaml", resume_study(unique_name, postgres_url, tmp_path, workers=2)
    )
    job = submit(path)
    wait_until((tmp_path / "held.txt").exists, 90, "trial 0 to save epoch 1")
    worker = next(
        t.user_attrs["slurm_worker"]
        for t in optuna.load_study(study_name=unique_name, storage=postgres_url).trials
        if t.number == 0
    )
    subprocess.run(["scancel", worker], check=True, timeout=30)
    states = wait_job_done(job, 120)
    assert sorted(states.values()) == ["CANCELLED", "COMPLETED"], states
    copy = check_resumed(postgres_url, unique_name, tmp_path)
    assert copy.user_attrs["slurm_worker"] != worker


def test_a_preempted_worker_s_trial_is_resumed_when_it_is_requeued(
    preempting_cluster: int, postgres_url: str, unique_name: str, tmp_path: Path
) -> None:
    cpus = preempting_cluster
    doc = resume_study(
        unique_name, postgres_url, tmp_path, workers=1, requeue=True, cpus_per_worker=cpus
    )
    path = write_yaml(tmp_path / "study.yaml", doc)
    job = submit(path)
    wait_until((tmp_path / "held.txt").exists, 90, "trial 0 to save epoch 1")
    preempt(job, cpus)  # the worker holds the whole node: the urgent job preempts it
    assert wait_job_done(job, 120) == {job: "COMPLETED"}
    check_resumed(postgres_url, unique_name, tmp_path)


PAUSE_XS = (0.45, 0.9, 0.01, 0.02, 0.03, 0.015)


def test_a_trial_paused_by_a_cancelled_worker_is_continued_by_the_next_one(
    slurm_cluster: int, postgres_url: str, unique_name: str, tmp_path: Path
) -> None:
    """The first worker pauses trial 0 (0.45 < the threshold 0.6 after epoch 0; it saves the
    state then), then holds in trial 1 and is cancelled: trial 0 is not promotable yet (it
    ranks in the top third of step 0 only once six trials reached it). The second worker runs
    the rest and continues trial 0 from its state, as one curve, on another worker."""
    doc = resume_study(unique_name, postgres_url, tmp_path, workers=1)
    doc["study"].update(
        n_trials=len(PAUSE_XS),
        sampler={"kind": "random", "seed": 0},
        pruner={"kind": "threshold", "lower": 0.6},
        enqueue=[{"x": x} for x in PAUSE_XS],
    )
    doc["trials"].update(pause=True)
    doc["trainer"]["config"].update(
        epochs=3, hold={"at": 0, "trial": 1, "file": str(tmp_path / "held.txt")}
    )
    path = write_yaml(tmp_path / "study.yaml", doc)
    first_job = submit(path)
    wait_until((tmp_path / "held.txt").exists, 90, "trial 1 to save epoch 0")
    study = optuna.load_study(study_name=unique_name, storage=postgres_url)
    paused = study.trials[0]
    assert paused.state == optuna.trial.TrialState.PRUNED
    assert paused.user_attrs["status"] == "paused", paused.user_attrs
    done = run_dvt_hpo("cancel", path, cwd=tmp_path, timeout_s=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CANCELLED" in wait_job_done(first_job, 120).values()
    assert wait_job_done(submit(path), 180)
    trials = optuna.load_study(study_name=unique_name, storage=postgres_url).trials
    (continued,) = [t for t in trials if retry_history(t) == [0]]
    assert continued.state == optuna.trial.TrialState.COMPLETE, continued.user_attrs
    assert continued.user_attrs["slurm_worker"] != paused.user_attrs["slurm_worker"]
    assert (continued.number, 1) in starts(tmp_path)  # from the state saved at the pause
    value, curve = 0.0, {}
    for epoch in range(3):
        value = value * 0.5 + 0.45
        curve[epoch] = value
    assert continued.intermediate_values == curve and continued.value == value
    assert not (tmp_path / "runs" / unique_name / "resume" / "trial-0000").exists()
