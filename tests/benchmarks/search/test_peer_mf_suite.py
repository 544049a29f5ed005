"""benchmarks/search/peer_mf_suite.py's simulation, with a scripted tool in place of SMAC3 or DEHB
(neither is installed beside the core suite): a promoted config is trained again from its first
step and the budget counts those steps again, a training below the last step counts for no
regret, and the budget cuts the training in progress."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "benchmarks" / "search"), str(ROOT / "benchmarks")]

from families import family  # noqa: E402
from peer_mf_suite import simulate, whole_steps  # noqa: E402
from peer_syne_suite import Stretches  # noqa: E402

FAMILY = "iaml_glmnet"  # 10 steps


class Scripted:
    """Asks for one config at Hyperband's budgets in turn, and keeps what it is told."""

    def __init__(self, config: dict[str, Any], budgets: list[float]) -> None:
        self.config, self.budgets = config, budgets
        self.asked = 0
        self.told: list[tuple[int, float, int]] = []

    def ask(self) -> tuple[Any, dict[str, Any], float]:
        n, self.asked = self.asked, self.asked + 1  # the handle: the ask's number
        return n, self.config, self.budgets[min(n, len(self.budgets) - 1)]

    def tell(self, handle: Any, value: float, steps: int) -> None:
        self.told.append((handle, value, steps))


@pytest.fixture
def task_and_config() -> tuple[str, dict[str, Any]]:
    try:
        f = family(FAMILY)
        task = f.tasks[0]
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return task, f.trainer_defaults()


def test_budgets_round_to_whole_steps_within_the_curve() -> None:
    assert [whole_steps(b, 10) for b in (0.4, 1.11, 3.33, 10.0, 12.0)] == [1, 1, 3, 10, 10]
    assert [whole_steps(b, 52) for b in (1.93, 5.78, 17.3, 52.0)] == [2, 6, 17, 52]


def test_a_promoted_config_trains_again_and_only_full_trainings_have_a_value(
    task_and_config: tuple[str, dict[str, Any]],
) -> None:
    task, config = task_and_config
    curve = family(FAMILY).curve(task, config)
    tool = Scripted(config, [1.11, 3.33, 10.0])
    log = Stretches(budget=15, steps=10)
    evaluations, configs = simulate(tool, FAMILY, task, 1, log)
    assert log.exhausted and log.spent == 15
    assert log.all_rows() == [
        [0, "PRUNED", 1, None],
        [1, "PRUNED", 3, None],
        [2, "COMPLETE", 10, float(curve[9])],
        [3, "RUNNING", 1, None],  # the fourth training, cut by the budget
    ]
    assert configs == 1  # one config, trained three times from its first step
    assert [e[2] for e in evaluations] == [1, 3, 10]
    assert [t[2] for t in tool.told] == [1, 3, 10]


def test_the_budget_cuts_the_training_in_progress(
    task_and_config: tuple[str, dict[str, Any]],
) -> None:
    task, config = task_and_config
    log = Stretches(budget=12, steps=10)
    evaluations, _ = simulate(Scripted(config, [1.11, 3.33, 10.0]), FAMILY, task, 1, log)
    assert log.all_rows()[-1] == [2, "RUNNING", 8, None]
    assert [e[2] for e in evaluations] == [1, 3]  # the cut training is never told


def test_shards_split_the_studies_left_to_run_between_processes(tmp_path: Path) -> None:
    """``--shard K/N``: N processes, each with its own results file, run every study once."""
    import argparse

    from peer_syne_suite import grid_parser, run_grid

    ran: dict[int, list[tuple[str, str, int]]] = {0: [], 1: []}

    def study_in(k: int) -> Any:
        def study(cell: str, fam: str, task: str, seed: int, budget: int) -> dict[str, Any]:
            ran[k].append((task, cell, seed))
            return {"trials": [], "wall_s": 0.0}

        return study

    for k in (0, 1):
        argv = ["--results", str(tmp_path / f"shard{k}.jsonl.gz"), "--families", "iaml_glmnet"]
        argv += ["--seeds", "3", "--cells", "a,b", "--shard", f"{k}/2"]
        args = grid_parser("peers", ["a", "b"], "a").parse_args(argv)
        run_grid(args, study_in(k), "test", known=lambda cell: cell in ("a", "b"))
    together = ran[0] + ran[1]
    assert len(together) == len(set(together)) == 2 * 3 * 2  # 2 report tasks, 3 seeds, 2 cells
    assert ran[0] and ran[1]
    with pytest.raises(argparse.ArgumentTypeError, match="'2/2' is not K/N"):
        from peer_syne_suite import shard

        shard("2/2")
