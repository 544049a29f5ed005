"""A spent ``study.budget`` leaves no retry copy WAITING for ever (docs/budgets.md).

A unit test of the decision, and real workers on SQLite and PostgreSQL: one killed with its
trial running while another spends the budget, then a rerun; the killed trial's copy is closed
as over budget (or ran, when it was taken before the budget ran out), nothing is left
WAITING or RUNNING.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dvt_hpo.devices.slots import visible_gpus
from dvt_hpo.recovery import leftovers
from dvt_hpo.recovery.kill_points import ENV_KILL_AT
from tests.conftest import run_dvt_hpo, toy_study
from tests.orchestrator import Orchestrator, load_trials, states


def _trial(number: int, state: str, history: list[int] | None = None) -> Any:
    attrs = {"retry_history": history} if history is not None else {}
    if history:
        attrs["failed_trial"] = history[-1]
    return SimpleNamespace(number=number, state=SimpleNamespace(name=state), system_attrs=attrs)


def test_only_waiting_retry_copies_are_closed() -> None:
    trials = [
        _trial(0, "FAIL"),
        _trial(1, "COMPLETE"),
        _trial(2, "WAITING", [0]),  # a copy: closed
        _trial(3, "WAITING"),  # a seed from study.enqueue: kept for a run with budget left
        _trial(4, "RUNNING", [0]),
    ]
    assert leftovers.copies_to_close(trials) == [2]
    assert leftovers.closed_reason("study.budget.epochs=3 spent (3 epochs)") == (
        "study.budget.epochs=3 spent (3 epochs): closed before it ran"
    )


LIMITS = {"epochs": 3, "hours": 0.0008, "cpu_hours": 0.0004, "gpu_hours": 0.0004}


@pytest.mark.parametrize("limit", list(LIMITS))
def test_a_spent_budget_closes_the_copy_its_sweep_enqueued(
    tmp_path: Path, write_study: Callable[..., Path], unique_name: str, limit: str
) -> None:
    """``close_when_spent`` on CPU, for every limit: the worker process test below needs a
    CUDA device for ``gpu_hours`` (a CPU study refuses it), so its branch is tested here.
    The dead worker's trial is failed by the sweep, which enqueues its copy; the copy is
    closed as over budget with the spent limit's line, its chain's resume state deleted, and
    a seed from ``study.enqueue`` kept WAITING."""
    import optuna

    from dvt_hpo.budget.compute import Spent, exhausted
    from dvt_hpo.budget.trials import OVER_BUDGET_ATTR
    from dvt_hpo.optuna_api.private import trial_id_of
    from dvt_hpo.spec.model import BudgetSpec
    from dvt_hpo.studyfile import load_spec
    from dvt_hpo.views.status import format_status, read_status
    from dvt_hpo.wire.trial_dir import ResumeDir

    url = f"sqlite:///{tmp_path / 'study.db'}"
    runs = tmp_path / "runs"
    doc = toy_study(
        unique_name,
        study={"storage": url, "n_trials": 100},
        trials={"warm": False, "resume": True, "runs_dir": str(runs)},
    )
    spec = load_spec(write_study(doc))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=unique_name, storage=url)
    storage = study._storage
    dead = study.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})  # trial 0
    state = ResumeDir.of(runs, 0).state
    state.mkdir(parents=True)
    (state / "epoch.json").write_text("{}")
    study.enqueue_trial({"x": 0.5})  # trial 1: a seed, not a copy
    sweeps: list[int] = []

    def sweep() -> None:
        # What the stale sweep does to a dead worker's trial: FAIL, then its copy enqueued
        # with the chain's retry history (trial 2).
        sweeps.append(len(sweeps))
        if study.get_trials(deepcopy=False)[0].state.name != "RUNNING":
            return
        storage.set_trial_state_values(trial_id_of(dead), optuna.trial.TrialState.FAIL)
        study.enqueue_trial(dead.params)
        copy_id = trial_id_of(study.get_trials(deepcopy=False)[-1])
        storage.set_trial_system_attr(copy_id, "failed_trial", 0)
        storage.set_trial_system_attr(copy_id, "retry_history", [0])

    why = exhausted(BudgetSpec(**{limit: LIMITS[limit]}), Spent(**{limit: 2 * LIMITS[limit]}))
    assert why is not None and why.startswith(f"study.budget.{limit}=")
    closed = leftovers.close_when_spent(
        why,
        study,
        storage,
        spec,
        sweep=sweep,
        study_lock=contextlib.nullcontext,
        retry_lock=contextlib.nullcontext,
    )
    assert closed == [2] and sweeps == [0]
    trials = study.get_trials(deepcopy=False)
    assert [t.state.name for t in trials] == ["FAIL", "WAITING", "FAIL"]
    copy = trials[2]
    assert copy.system_attrs[OVER_BUDGET_ATTR] is True
    assert copy.user_attrs["status"] == "over-budget"
    assert copy.user_attrs["reason"] == f"{why}: closed before it ran"
    # Names the spent limit; its exact form (the limit, or its line) is being made uniform.
    assert limit in copy.user_attrs["over_budget"]
    assert not ResumeDir.of(runs, 0).path.exists()  # the chain's state went with its copy
    assert leftovers.closed_line(why, closed) == (
        f"{why}: retry copy of interrupted trials closed as over budget, never run: 2"
    )
    shown = format_status(read_status(storage, storage.get_study_id_from_name(unique_name), spec))
    assert "1 waiting" in shown and "1 over budget" in shown, shown
    # Closing again finds nothing: the seed is kept for a run with budget left.
    assert leftovers.close_copies(study, storage, why) == []


@pytest.mark.processes
@pytest.mark.parametrize("limit", list(LIMITS))
def test_a_budget_spent_while_a_worker_was_killed_leaves_nothing_waiting(
    storage_url: str,
    write_study: Callable[..., Path],
    orchestrator: Callable[..., Orchestrator],
    unique_name: str,
    limit: str,
) -> None:
    gpu = limit == "gpu_hours"
    if gpu and not visible_gpus():
        pytest.skip("needs a CUDA device (a CPU study refuses gpu_hours)")
    doc = toy_study(
        unique_name,
        study={
            "storage": storage_url,
            "n_trials": 100,
            "budget": {limit: LIMITS[limit]},
            "heartbeat_interval_s": 1,
            "grace_period_s": 2,
        },
        trials={"warm": False, "devices": "cuda" if gpu else "cpu"},
        trainer={
            "entrypoint": "tests.entrypoints.toy:run",
            "config": {"curve": [0.1, 0.2, 0.3], "actions": [{"do": "curve", "sleep_s": 0.4}]},
        },
    )
    study = write_study(doc)
    killed = orchestrator(study, env={ENV_KILL_AT: "trial:running"})
    code, out = killed.finish(90)
    assert code != 0, out
    assert states(load_trials(study)) == [(0, "RUNNING")]
    spender = orchestrator(study)
    code, out = spender.finish(120)
    assert code == 0, out
    # The spender waited for the dead worker's trial to go stale and closed its copy itself.
    left = [(t.number, t.state.name) for t in load_trials(study) if t.state.name != "COMPLETE"]
    assert ("RUNNING" not in dict(left).values()) and ("WAITING" not in dict(left).values()), out
    code, out = orchestrator(study).finish(120)  # a rerun: spent, nothing to do
    assert code == 0, out
    trials = load_trials(study)
    left = [(t.number, t.state.name) for t in trials if t.state.name in ("WAITING", "RUNNING")]
    assert left == [], states(trials)
    assert trials[0].state.name == "FAIL"
    (copy,) = [t for t in trials if t.system_attrs.get("retry_history") == [0]]
    if copy.state.name != "COMPLETE":  # not taken before the budget ran out: closed unrun
        assert copy.state.name == "FAIL", states(trials)
        assert copy.user_attrs["status"] == "over-budget"
        assert copy.user_attrs["over_budget"] == limit
        assert copy.user_attrs["reason"].endswith("closed before it ran")
        assert "epochs_reported" not in copy.user_attrs
        shown = run_dvt_hpo("status", study, cwd=study.parent, timeout_s=60)
        assert "0 waiting" in shown.stdout and "1 over budget" in shown.stdout, shown.stdout
