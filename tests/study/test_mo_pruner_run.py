"""The several-objectives pruner in a real study: ``dvt-hpo run`` with two objectives, the
trial processes reporting over the control socket, dominated trials recorded PRUNED."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from dvt_hpo.sampling.mo_pruner import RUNG_ATTR_PREFIX
from tests.conftest import toy_study
from tests.tradeoff_study import run_tradeoff

pytestmark = pytest.mark.processes

# Best first: each row is better on both objectives than every row after it.
POINTS = [[0.9, 1.0], [0.7, 2.0], [0.5, 3.0], [0.3, 4.0], [0.2, 5.0], [0.1, 6.0]]
ETA = 3


def expected_states(order: list[int]) -> list[str]:
    """Successive halving on a chain, by hand: at rung 1 (the only rung before the last step),
    a trial is stopped when ``p / n > 1 / ETA``, ``p`` the trials before it that are better
    (lower rows), ``n`` the trials at the rung with it."""
    states = []
    for i, row in enumerate(order):
        better = sum(1 for other in order[:i] if other < row)
        states.append("PRUNED" if better / (i + 1) > 1 / ETA else "COMPLETE")
    return states


def test_dominated_trials_are_pruned(tmp_path: Path, unique_name: str) -> None:
    doc = toy_study(
        unique_name,
        trainer={
            "entrypoint": "tests.entrypoints.chain:run",
            "config": {"x": 0, "epochs": 3, "points": POINTS},
        },
        search_space=[
            {"name": "x", "path": "x", "kind": "categorical", "choices": list(range(len(POINTS)))}
        ],
    )
    doc["study"]["n_trials"] = len(POINTS)
    doc["study"]["sampler"] = {"kind": "grid", "seed": 1}
    doc["study"]["pruner"] = {"kind": "mo_asha", "reduction_factor": ETA}
    doc["objective"] = {
        "metrics": [
            {"name": "score", "direction": "maximize"},
            {"name": "cost", "direction": "minimize"},
        ]
    }
    doc["trials"]["parallel"] = 1  # arrival order = trial order
    path, out = run_tradeoff(tmp_path, doc)

    study = optuna.load_study(
        study_name=unique_name, storage=f"sqlite:///{tmp_path / (unique_name + '.db')}"
    )
    trials = sorted(study.trials, key=lambda t: t.number)
    order = [int(t.params["x"]) for t in trials]
    states = [t.state.name for t in trials]
    assert sorted(order) == list(range(len(POINTS)))
    assert states == expected_states(order), (order, out)
    assert "PRUNED" in states, order  # the seed's order prunes some: the test has teeth
    assert trials[order.index(0)].state.name == "COMPLETE"  # the dominant one always runs on
    for trial in trials:
        stored = trial.system_attrs[f"{RUNG_ATTR_PREFIX}1"]
        score, cost = POINTS[int(trial.params["x"])]
        # Step 1 of steps 0..2: the only rung (none at the last step, max_resource 2).
        assert stored["values"] == pytest.approx([score * 2 / 3, cost * 2])
        assert f"{RUNG_ATTR_PREFIX}2" not in trial.system_attrs
        if trial.state.name == "PRUNED":
            assert trial.user_attrs["pruned_step"] == 1
            assert trial.user_attrs["reason"] == "pruned at step 1 by MOASHAPruner"
        else:
            assert trial.values == pytest.approx([score, cost * 3])
