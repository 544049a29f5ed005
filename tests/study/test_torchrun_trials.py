"""DDP trials: ``trials.launcher: torchrun`` with 2 ranks on CPU (gloo), through the real runner.

The built-in trainer completes a trial and is pruned at its first epoch; a failing rank fails
the trial with that rank's own reason. Every rank's process is gone when the runner returns.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest

from dvt_hpo.process import tree as process_tree
from dvt_hpo.study import trial_run
from dvt_hpo.studyfile import BUILTIN_ENTRYPOINT
from dvt_hpo.wire.protocol import Hello
from tests.conftest import TOY_ENTRYPOINT, toy_study
from tests.orchestrator import processes_mentioning

pytestmark = pytest.mark.processes

DDP_TRIALS = {
    "launcher": "torchrun",
    "nproc_per_node": 2,
    "devices": "cpu",
    "timeout_s": 120,
    "stop_grace_s": 5,
}


def trainer_study(name: str, *, epochs: int, pruner: dict[str, Any]) -> dict[str, Any]:
    """A one-trial study of the built-in trainer (default entry point) on a slice of digits."""
    doc = toy_study(
        name,
        study={"n_trials": 1, "pruner": pruner},
        objective={"metric": "macro_f1", "direction": "maximize"},
        trials=DDP_TRIALS,
        batch_size={"auto": True, "min": 8, "max": 32},
        trainer={
            "config": {
                "epochs": epochs,
                "seed": 0,
                "model": {"builder": "cnn", "kwargs": {"width": 8}},
                "data": {"kind": "digits", "max_samples": 300, "batch_size": 16},
                "optim": {"optim_args": {"lr": 0.01}},
            }
        },
        search_space=[
            {
                "name": "lr",
                "path": "optim.optim_args.lr",
                "kind": "float",
                "low": 1e-3,
                "high": 1e-2,
                "log": True,
            },
        ],  # fmt: skip
    )
    del doc["trainer"]["entrypoint"]  # the default: the built-in trainer
    return doc


@pytest.fixture
def rank_pids(monkeypatch: pytest.MonkeyPatch) -> dict[int, dict[int, int]]:
    """``{trial number: {rank: pid}}`` from the ranks' hello messages."""
    seen: dict[int, dict[int, int]] = {}
    original = trial_run.TrialRun.on_hello

    def on_hello(self: trial_run.TrialRun, hello: Hello) -> None:
        seen.setdefault(self.number, {})[hello.rank] = hello.pid
        original(self, hello)

    monkeypatch.setattr(trial_run.TrialRun, "on_hello", on_hello)
    return seen


def assert_all_gone(pids: dict[int, int], runs_dir: Path) -> None:
    assert sorted(pids) == [0, 1], f"expected hellos from ranks 0 and 1, got {pids}"
    alive = [pid for pid in pids.values() if process_tree.pid_alive(pid)]
    assert alive == [], f"ranks still alive after the trial ended: {alive}"
    # torchrun's agent and both ranks carry the payload path on their command lines.
    assert processes_mentioning(runs_dir) == []


def test_a_ddp_trial_of_the_builtin_trainer_completes(
    tmp_path: Path,
    run_study: Callable[[dict[str, Any]], optuna.Study],
    rank_pids: dict[int, dict[int, int]],
    unique_name: str,
) -> None:
    study = run_study(trainer_study(unique_name, epochs=1, pruner={"kind": "none"}))
    (trial,) = study.trials
    assert trial.state.name == "COMPLETE", trial.user_attrs.get("reason")
    assert 0.0 <= trial.value <= 1.0
    assert trial.intermediate_values == {0: trial.value}
    assert trial.user_attrs["last_metrics"]["macro_f1"] == trial.value
    # Both ranks agreed on one size through the study's cache protocol.
    assert 8 <= trial.user_attrs["batch_size"] <= 32
    assert trial.user_attrs["batch_size_cache"] == "miss"
    assert_all_gone(rank_pids[0], tmp_path.resolve() / "runs")
    payload = json.loads(
        (tmp_path / "runs" / unique_name / "trial-0000" / "payload.json").read_text()
    )
    assert payload["entrypoint"] == BUILTIN_ENTRYPOINT


def test_a_pruned_ddp_trial_stops_at_the_pruned_epoch_and_every_rank_exits(
    tmp_path: Path,
    run_study: Callable[[dict[str, Any]], optuna.Study],
    rank_pids: dict[int, dict[int, int]],
    unique_name: str,
) -> None:
    # ThresholdPruner prunes any step whose value is below `lower`, whatever the direction:
    # a macro-F1 of 0.999 after one epoch of a tiny CNN is out of reach.
    pruner = {"kind": "threshold", "lower": 0.999, "n_warmup_steps": 0}
    study = run_study(trainer_study(unique_name, epochs=3, pruner=pruner))
    (trial,) = study.trials
    assert trial.state.name == "PRUNED", trial.user_attrs.get("reason")
    assert list(trial.intermediate_values) == [0]
    assert trial.user_attrs["pruned_step"] == 0
    assert trial.user_attrs["epochs_reported"] == 1
    result = json.loads(
        (tmp_path / "runs" / unique_name / "trial-0000" / "result.json").read_text()
    )
    assert (result["status"], result["step"]) == ("pruned", 0)
    assert_all_gone(rank_pids[0], tmp_path.resolve() / "runs")


def test_a_failing_rank_fails_the_ddp_trial_with_its_own_reason(
    tmp_path: Path,
    run_study: Callable[[dict[str, Any]], optuna.Study],
    rank_pids: dict[int, dict[int, int]],
    unique_name: str,
) -> None:
    meet = tmp_path / "meet"
    os.mkfifo(meet)  # both ranks block opening it until the other one arrives
    config = {
        "actions": [
            {"do": "write", "rank": 0, "path": str(meet), "text": "chief started"},
            {"do": "read", "rank": 1, "path": str(meet)},
            {"do": "raise", "rank": 1, "type": "ValueError", "message": "rank one broke"},
            # Far longer than the test: torchrun stops the chief when rank 1 fails.
            {"do": "sleep", "rank": 0, "seconds": 120},
        ]
    }
    doc = toy_study(
        unique_name,
        study={"n_trials": 1},
        trials=DDP_TRIALS,
        trainer={"entrypoint": TOY_ENTRYPOINT, "config": config},
    )
    study = run_study(doc)
    (trial,) = study.trials
    assert trial.state.name == "FAIL"
    reason = trial.user_attrs["reason"]
    assert reason.startswith("rank 1: ") and "ValueError: rank one broke" in reason, reason
    assert trial.user_attrs["duration_s"] < 60
    # The chief was stopped by torchrun (it did not fail): its result says so.
    result = json.loads(
        (tmp_path / "runs" / unique_name / "trial-0000" / "result.json").read_text()
    )
    assert result["status"] == "stopped"
    assert_all_gone(rank_pids[0], tmp_path.resolve() / "runs")
