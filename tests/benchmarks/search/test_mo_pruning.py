"""benchmarks/search/mo_pruning.py: the hypervolume's arithmetic, the budget marks, and a study through
dvt-hpo run equal to its replay. The surrogate ships in benchmarks/search/data/yahpo_lcbench."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks" / "search"))

try:
    import mo_pruning as mo
    from lcbench_surrogate import data_dir

    data_dir()
except FileNotFoundError as exc:  # as tests/benchmarks/search/test_search_efficiency.py
    pytest.skip(str(exc), allow_module_level=True)

# The box: accuracy 100 (ideal) to 0 (worst), time 0 (ideal) to 10 (worst), as minimized.
BOX = (np.array([-100.0, 0.0]), np.array([0.0, 10.0]))


def test_hypervolume_of_a_staircase() -> None:
    # (accuracy 50, time 5) alone: a quarter of the box; with (accuracy 100, time 10) nothing
    # is added (at the worst time); with (accuracy 75, time 7.5) a sixteenth more.
    assert mo.hypervolume([(50.0, 5.0)], *BOX) == pytest.approx(0.25)
    assert mo.hypervolume([(50.0, 5.0), (100.0, 10.0)], *BOX) == pytest.approx(0.25)
    assert mo.hypervolume([(50.0, 5.0), (75.0, 7.5)], *BOX) == pytest.approx(0.25 + 0.0625)
    assert mo.hypervolume([(50.0, 5.0), (40.0, 6.0)], *BOX) == pytest.approx(0.25)  # dominated
    assert mo.hypervolume([(100.0, 0.0)], *BOX) == pytest.approx(1.0)
    assert mo.hypervolume([(-5.0, 1.0)], *BOX) == 0.0  # worse than the worst accuracy
    assert mo.hypervolume([], *BOX) == 0.0


def test_a_trial_past_a_mark_does_not_count_there() -> None:
    trials = [
        mo.Trial(0, "COMPLETE", 4, 4, (50.0, 5.0), ()),
        mo.Trial(1, "PRUNED", 1, 5, None, ()),
        mo.Trial(2, "COMPLETE", 4, 9, (100.0, 0.0), ()),
    ]
    hv = mo.marks_hv(trials, 10, BOX)  # the marks are shares of 10 epochs
    assert mo.at(hv, 0.5) == pytest.approx(0.25)  # trial 2 ended at epoch 9
    assert mo.at(hv, 1.0) == pytest.approx(1.0)
    assert hv[0] == 0.0  # nothing complete by epoch 0.5


def test_the_replay_spends_the_budget_and_prunes() -> None:
    trials = mo.replay("random", "mo_asha", "3945", 0, 5 * 52)
    assert trials[-1].spent >= 5 * 52 and trials[-2].spent < 5 * 52
    assert {t.state for t in trials} == {"COMPLETE", "PRUNED"}
    assert all((t.values is None) == (t.state == "PRUNED") for t in trials)


@pytest.mark.processes
def test_dvt_hpo_run_is_the_replay() -> None:
    real = mo.run_study("tpe", "mo_asha", "167168", 1, 3 * 52)
    again = mo.replay("tpe", "mo_asha", "167168", 1, 3 * 52)
    assert [(t.number, t.state, t.epochs) for t in real] == [
        (t.number, t.state, t.epochs) for t in again
    ]
    assert any(t.state == "PRUNED" for t in real)
    assert np.allclose([t.params for t in real], [t.params for t in again], rtol=1e-12)
