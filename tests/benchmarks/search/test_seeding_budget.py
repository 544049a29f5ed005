"""benchmarks/search/seeding_budget.py: its replay stops as ``run`` does, and its tables print. The
surrogate ships in benchmarks/search/data/yahpo_lcbench."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks" / "search"))

try:
    import seeding_budget as sb
except FileNotFoundError as exc:  # as tests/benchmarks/search/test_search_efficiency.py
    pytest.skip(str(exc), allow_module_level=True)
from lcbench_surrogate import MAX_EPOCHS, Surrogate  # noqa: E402


def test_an_epochs_budget_lets_the_running_trial_finish() -> None:
    sur = Surrogate()
    task = sur.tasks[0]
    run = sb.replay(sb._spec(sb.document(task, 0, n_trials=None, epochs=100)), task, sur)
    # Started while under 100 epochs; the last one finished past it, by less than a trial.
    assert 100 <= run.epochs < 100 + MAX_EPOCHS
    by_trials = sb.replay(sb._spec(sb.document(task, 0, n_trials=3, epochs=None)), task, sur)
    assert by_trials.trials == 3


def test_seeds_run_first(capsys: pytest.CaptureFixture[str]) -> None:
    sur = Surrogate()
    seeds = sb.warm_configs(sur.tasks[0], sur.tasks[1], 0, 2, sur)
    assert 1 <= len(seeds) <= sb.TOP and all(set(s) == set(sb.HYPERPARAMETERS) for s in seeds)


def test_the_tables_print(capsys: pytest.CaptureFixture[str]) -> None:
    assert sb.main(["--pairs", "1", "--seeds", "1", "--budget", "3"]) == 0
    out = capsys.readouterr().out
    assert "| mean, nearest neighbour |" in out and "budget.epochs=156" in out
    # Regret: the task's best minus the best found, never below 0; "-" before any trial ended.
    mean = next(line for line in out.splitlines() if line.startswith("| mean, nearest"))
    cells = [c.strip() for c in mean.strip("|").split("|")[2:]]
    assert cells[2] != "-" and all(c == "-" or float(c) >= 0 for c in cells), out
