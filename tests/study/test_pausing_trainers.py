"""``trials.pause`` with the trainers that keep their own state (docs/pause.md, "Trainers"): an
entry point that saves when it is stopped (``ctx.pause_enabled``), and a command trainer whose
state is the one it saved last. Either way the paused trial continues as one curve and ends at
the value of the same trial never paused.

Each epoch ``value = value * 0.5 + x`` (tests/entrypoints/resumable.py ``counter``,
tests/entrypoints/cmd_resume.py); the threshold pruner stops every trial below 0.6 after its
first epoch. ``x = 0.45`` reaches 0.45 (paused), then 0.675 and 0.7875; the small ``x`` stay
far below, so which trial continues is decided by the curves, not by timing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from dvt_hpo.budget.trials import OVER_BUDGET_ATTR
from dvt_hpo.recovery import retries
from tests.conftest import run_dvt_hpo
from tests.recovery.test_resume import (
    ROOT,
    chain_folder,
    counter_doc,
    env_with,
    expected_curve,
    load,
    run_cli,
    starts,
    write_doc,
)

pytestmark = pytest.mark.processes

XS = (0.9, 0.45, 0.01, 0.02, 0.03, 0.015)
EPOCHS = 3


def paused_doc(name: str, tmp: Path, trainer: str) -> dict[str, Any]:
    doc = counter_doc(name, tmp, epochs=EPOCHS)
    doc["study"].update(
        n_trials=len(XS),
        sampler={"kind": "random", "seed": 0},
        pruner={"kind": "threshold", "lower": 0.6},
        enqueue=[{"x": x} for x in XS],
    )
    doc["trials"].update(pause=True, parallel=1)
    if trainer == "command":
        doc["trainer"] = {
            "command": [
                "{python}",
                str(ROOT / "tests" / "entrypoints" / "cmd_resume.py"),
                "--x={x}",
                f"--epochs={EPOCHS}",
                "--resume-dir={resume_dir}",
                "--trial={trial_number}",
                f"--log={tmp / 'starts.txt'}",
            ],
            "config": {"x": 0.5},
        }
    return doc


@pytest.mark.parametrize("trainer", ["entry point", "command"])
def test_a_paused_trial_of_a_trainer_with_its_own_state_continues_as_one_curve(
    tmp_path: Path, unique_name: str, trainer: str
) -> None:
    path = write_doc(tmp_path, paused_doc(unique_name, tmp_path, trainer))
    done = run_cli(path, timeout_s=150)
    assert done.returncode == 0, done.stdout + done.stderr
    trials = load(path, unique_name).trials
    copies = [t for t in trials if retries.retry_history(t) == [1]]
    assert len(copies) == 1, [(t.number, t.state.name) for t in trials]
    (copy,) = copies
    assert trials[1].state == optuna.trial.TrialState.PRUNED
    assert copy.state == optuna.trial.TrialState.COMPLETE, copy.user_attrs
    assert copy.value == expected_curve(0.45, EPOCHS)[EPOCHS - 1]
    assert copy.intermediate_values == expected_curve(0.45, EPOCHS)
    # The entry point saved the epoch it was paused at: the continuation starts after it. The
    # command trainer is stopped at its report, before it saves: its continuation trains that
    # epoch again (docs/pause.md: the state it saved last), and is not paused there again.
    first = 1 if trainer == "entry point" else 0
    assert (copy.number, first) in starts(tmp_path)
    assert (copy.user_attrs["resumed_epochs"], copy.user_attrs["redone_epochs"]) == (
        first,
        1 - first,
    )
    assert f"trial {copy.number} (continues paused trial 1)" in done.stdout
    # The study is over: no paused state is left.
    assert not any(chain_folder(path, unique_name, t.number).exists() for t in trials)


WORKER_XS = (0.9, 0.45, 0.5, 0.01, 0.4, 0.02, 0.55, 0.03)


def test_two_workers_pause_and_continue_every_chain_as_one_curve(
    tmp_path: Path, unique_name: str
) -> None:
    """``run --workers 2``: which worker pauses or continues which trial is up to timing, so
    the test checks what holds whatever the order: every attempt's curve is its config's
    curve (``value * 0.5 + x``), a chain completes at most once and trains no epoch twice, the
    continuations are not counted as trials, and no state outlives the study. A worker that
    lost the race for the last trial closes its ask as over budget before sampling (no params,
    never counted): those are left out."""
    doc = paused_doc(unique_name, tmp_path, "entry point")
    doc["study"].update(n_trials=len(WORKER_XS), enqueue=[{"x": x} for x in WORKER_XS])
    path = write_doc(tmp_path, doc)
    done = run_dvt_hpo("run", path, "--workers", "2", cwd=tmp_path, env=env_with(), timeout_s=240)
    assert done.returncode == 0, done.stdout + done.stderr
    every = load(path, unique_name).trials
    over = [t for t in every if t.system_attrs.get(OVER_BUDGET_ATTR)]
    assert all(t.state == optuna.trial.TrialState.FAIL and not t.params for t in over)
    trials = [t for t in every if t not in over]
    roots: dict[int, list[optuna.trial.FrozenTrial]] = {}
    for trial in trials:
        roots.setdefault((retries.retry_history(trial) or [trial.number])[0], []).append(trial)
        expected = expected_curve(trial.params["x"], EPOCHS)
        assert all(expected[s] == v for s, v in trial.intermediate_values.items()), trial.number
    assert len(roots) == len(WORKER_XS)  # a continuation is not a new trial
    continued = 0
    for chain in roots.values():
        complete = [t for t in chain if t.state == optuna.trial.TrialState.COMPLETE]
        assert len(complete) <= 1
        continued += len(chain) - 1
        if complete:
            assert complete[0].intermediate_values == expected_curve(complete[0].params["x"], 3)
    assert continued >= 1, done.stdout  # 0.45 and 0.5 rank in the top third of step 0
    # Every attempt started after the last epoch its chain saved: none trained twice.
    first_epochs = dict(starts(tmp_path))
    for chain in roots.values():
        for before, after in zip(chain, chain[1:], strict=False):
            assert first_epochs[after.number] == max(before.intermediate_values) + 1
    # What is left, and the run's lines and trials, so that a rare ordering that leaves a
    # state behind says which one it was.
    left = sorted(str(p) for p in (tmp_path / "runs" / unique_name / "resume").rglob("*"))
    states = [(t.number, t.state.name, t.system_attrs) for t in every]
    assert not left, (left, done.stdout, states)
