"""benchmarks/search/peer_common.py: the peers' budget accounting, simulated time and result files,
without Ray or Syne Tune (their runners need virtualenvs of their own)."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks" / "search"))

import peer_common as pc  # noqa: E402


def _fields(cls: str) -> list[str]:
    """The fields of a dataclass of search_efficiency.py, read without importing it (its
    import loads the surrogate)."""
    tree = ast.parse((ROOT / "benchmarks" / "search" / "search_efficiency.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return [s.target.id for s in node.body if isinstance(s, ast.AnnAssign)]  # type: ignore[union-attr]


def _seconds(config: dict[str, Any], epochs: int) -> float:
    return 10.0 * epochs


def test_the_budget_cuts_the_running_trial_and_refuses_later_epochs() -> None:
    ledger = pc.Ledger(budget=5, max_epochs=3)
    for epoch in (1, 2, 3):
        assert ledger.result("a", epoch, 0.5 + epoch, {"x": 1})
    assert ledger.ended == {"a": "COMPLETE"}
    assert ledger.result("b", 1, 0.1, {"x": 2})
    ledger.stopped("b")  # its scheduler stops it at epoch 1
    assert ledger.result("c", 1, 0.9, {"x": 3})
    assert ledger.exhausted
    # Past the budget: nothing counts, and stopping "c" now is the budget's cut, not a prune.
    assert not ledger.result("c", 2, 0.95, {"x": 3})
    ledger.stopped("c")
    trials = ledger.trials(_seconds)
    assert [(t["number"], t["state"], t["epochs"], t["value"]) for t in trials] == [
        (0, "COMPLETE", 3, 3.5),
        (1, "PRUNED", 1, None),
        (2, "RUNNING", 1, None),
    ]
    assert sum(t["epochs"] for t in trials) == 5
    assert trials[0]["time_s"] == 30.0


def test_a_repeated_or_skipped_epoch_is_not_counted() -> None:
    ledger = pc.Ledger(budget=10, max_epochs=4)
    assert ledger.result("a", 1, 0.1, {})
    assert not ledger.result("a", 1, 0.1, {})
    assert not ledger.result("a", 3, 0.3, {})
    assert ledger.spent == 1


def test_trials_are_listed_in_the_order_they_end() -> None:
    ledger = pc.Ledger(budget=100, max_epochs=2)
    ledger.result("slow", 1, 0.1, {})
    ledger.result("fast", 1, 0.2, {})
    ledger.result("fast", 2, 0.3, {})
    ledger.result("slow", 2, 0.4, {})
    assert [(t["number"], t["value"]) for t in ledger.trials(_seconds)] == [(1, 0.3), (0, 0.4)]


def _tool(durations: dict[str, list[float]], stop_at: dict[str, int]) -> tuple[Any, Any, list]:
    """A fake tool: trials started in the order of ``durations``, each stopped at the epoch
    ``stop_at`` says; the calls it received are recorded."""
    names = iter(durations)
    calls: list[tuple[str, int]] = []

    def start() -> pc.NewTrial:
        name = next(names, "extra")  # past the named ones: trials that never end an epoch
        seconds = durations.get(name, [1e9] * 3)
        return pc.NewTrial(name, {}, [float(i) for i in range(len(seconds))], seconds)

    def result(trial: str, epoch: int, value: float) -> bool:
        calls.append((trial, epoch))
        return stop_at.get(trial) == epoch

    return start, result, calls


def test_simulate_handles_epochs_in_the_order_their_predicted_times_end() -> None:
    durations = {
        "a": [5.0, 5.0, 5.0],
        "b": [1.0, 1.0, 1.0],
        "c": [1.0, 1.0, 1.0],
        "d": [2.0, 100.0, 100.0],
    }
    start, result, calls = _tool(durations, {})
    ledger = pc.Ledger(budget=10, max_epochs=3)
    pc.simulate(2, start, result, ledger)
    # a and b start at 0; b ends at 3 and c starts, its epochs ending at 4, 5, 6 (a's first at
    # 5 too: scheduled earlier, handled first); d starts at 6 (epoch at 8); a's third epoch (at
    # 15) is the budget's 10th: counted, not told to the tool.
    assert calls == [
        ("b", 1), ("b", 2), ("b", 3), ("c", 1), ("a", 1), ("c", 2), ("c", 3), ("d", 1), ("a", 2)
    ]  # fmt: skip
    assert ledger.ended == {"b": "COMPLETE", "c": "COMPLETE", "a": "COMPLETE"}  # a: on the last
    assert (ledger.epochs["a"], ledger.epochs["d"]) == (3, 1)


def test_simulate_one_at_a_time_starts_the_next_trial_when_the_tool_stops_one() -> None:
    durations = {"a": [1.0, 1.0, 1.0], "b": [1.0, 1.0, 1.0], "c": [1.0, 1.0, 1.0]}
    start, result, calls = _tool(durations, {"a": 1})
    ledger = pc.Ledger(budget=5, max_epochs=3)
    pc.simulate(1, start, result, ledger)
    assert calls == [("a", 1), ("b", 1), ("b", 2), ("b", 3)]
    assert ledger.exhausted
    states = [(t["state"], t["epochs"]) for t in ledger.trials(_seconds)]
    assert states == [("PRUNED", 1), ("COMPLETE", 3), ("RUNNING", 1)]


def test_epoch_seconds_from_a_cumulative_time_that_is_not_always_increasing() -> None:
    assert pc.epoch_seconds([2.0, 5.0, 4.0, 6.0], floor=0.5) == [2.0, 3.0, 0.5, 1.0]


def test_a_study_result_has_search_efficiencys_fields_and_path(tmp_path: Path) -> None:
    ledger = pc.Ledger(budget=2, max_epochs=2)
    ledger.result("a", 1, 0.1, {})
    ledger.result("a", 2, 0.2, {})
    result = pc.study_result("syne-asha@4", "3945", 1, ledger, 3.5, ledger.trials(_seconds))
    assert list(result) == _fields("StudyResult")
    assert list(result["trials"][0]) == _fields("Trial")
    path = pc.save(tmp_path, result)
    assert path == tmp_path / "syne-asha@4" / "3945-1.json"
    assert json.loads(path.read_text()) == result
    assert pc.todo(["syne-asha@4", "syne-bohb@4"], ["3945"], [0, 1], tmp_path) == [
        ("syne-asha@4", "3945", 0),
        ("syne-bohb@4", "3945", 0),
        ("syne-bohb@4", "3945", 1),
    ]


def test_cell_names_say_the_concurrency() -> None:
    assert pc.cell_name("ray-asha-random", 1) == "ray-asha-random"
    assert pc.cell_name("ray-asha-random", 4) == "ray-asha-random@4"


def test_the_peer_tasks_are_every_fourth_of_the_surrogates_list() -> None:
    # config_space.json read directly: the order lcbench_surrogate.Surrogate().tasks has.
    sys.path.insert(0, str(ROOT / "benchmarks" / "search"))
    from lcbench_surrogate import data_dir

    space = json.loads((data_dir() / "config_space.json").read_text())
    tasks = next(h["choices"] for h in space["hyperparameters"] if h["name"] == "OpenML_task_id")
    assert list(pc.PEER_TASKS) == tasks[::4][:8]
