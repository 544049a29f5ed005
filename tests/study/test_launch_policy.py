"""The loop's launch policy: the deadline, the caller's gate, the budget's decision applied to
the running trials, the wait, and the foreign trials said once."""

from __future__ import annotations

import threading
import time
from typing import Any

from dvt_hpo.budget.compute import BudgetDecision
from dvt_hpo.study.launch_policy import FOREIGN_POLL_S, LaunchPolicy


class Run:
    def __init__(self) -> None:
        self.stopped: list[str] = []

    def stop_over_budget(self, why: str) -> None:
        self.stopped.append(why)


class Budget:
    def __init__(self, decision: BudgetDecision, strict: bool = False) -> None:
        self.decision = decision
        self.strict = strict
        self.asked: list[list[int]] = []

    def decide(self, running: list[int]) -> BudgetDecision:
        self.asked.append(sorted(running))
        return self.decision


def policy(lines: list[str], **kwargs: Any) -> LaunchPolicy:
    settings: dict[str, Any] = {
        "timeout_s": None,
        "gate": None,
        "budget": None,
        "running": {},
        "heartbeat_interval_s": 5.0,
        "ended": threading.Event(),
        "out": lines.append,
    }
    return LaunchPolicy(**(settings | kwargs))


def test_a_past_deadline_stops_launching_once() -> None:
    lines: list[str] = []
    p = policy(lines, timeout_s=0.0)
    p.check(None, True)  # type: ignore[arg-type]
    p.check(None, True)  # type: ignore[arg-type]
    assert not p.launching
    assert lines == ["study.timeout_s=0 reached: no new trials"]


def test_the_callers_gate_is_asked_only_with_a_free_slot_and_wins_over_the_budget() -> None:
    lines: list[str] = []
    budget = Budget(BudgetDecision("spent: no new trials", "spent"))
    p = policy(lines, gate=lambda study: "the job ends soon", budget=budget)
    p.check(None, False)  # type: ignore[arg-type]
    assert p.launching and lines == []
    p.check(None, True)  # type: ignore[arg-type]
    assert not p.launching and lines == ["the job ends soon"] and budget.asked == []


def test_a_strict_budget_stops_the_trials_it_names() -> None:
    lines: list[str] = []
    runs = {3: Run(), 4: Run()}
    why = "study.budget.epochs=2 spent (2 epochs)"
    budget = Budget(BudgetDecision(f"{why}: stopping", why, frozenset({3})), strict=True)
    ended = threading.Event()
    p = policy(lines, budget=budget, running=runs, ended=ended)
    p.check(None, True)  # type: ignore[arg-type]
    ended.set()
    assert not p.launching and lines == [f"{why}: stopping"]
    assert runs[3].stopped == [why] and runs[4].stopped == []
    assert budget.asked[0] == [3, 4]


def test_an_unspent_budget_launches() -> None:
    lines: list[str] = []
    p = policy(lines, budget=Budget(BudgetDecision(None)))
    p.check(None, True)  # type: ignore[arg-type]
    assert p.launching and lines == []


def test_the_strict_watch_stops_trials_that_never_report() -> None:
    runs = {0: Run()}
    budget = Budget(BudgetDecision("spent: stopping", "spent", frozenset({0})), strict=True)
    budget.decision = BudgetDecision(None)  # unspent at the gate
    ended = threading.Event()
    p = policy([], budget=budget, running=runs, heartbeat_interval_s=0.01, ended=ended)
    p.check(None, True)  # type: ignore[arg-type]
    budget.decision = BudgetDecision("spent: stopping", "spent", frozenset({0}))
    deadline = time.monotonic() + 10
    while not runs[0].stopped and time.monotonic() < deadline:
        ended.wait(0.01)
    ended.set()
    assert runs[0].stopped == ["spent"]


def test_the_wait_is_short_while_only_foreign_trials_run_and_never_past_the_deadline() -> None:
    p = policy([], heartbeat_interval_s=5.0)
    assert p.wait_s(only_foreign=False) == 5.0
    assert p.wait_s(only_foreign=True) == FOREIGN_POLL_S
    timed = policy([], timeout_s=0.5, heartbeat_interval_s=5.0)
    assert timed.wait_s(only_foreign=False) <= 0.5
    p.stop()
    assert p.wait_s(only_foreign=True) == 5.0


def test_the_foreign_trials_awaited_are_said_once_per_set() -> None:
    lines: list[str] = []
    p = policy(lines)
    p.awaiting([1, 2], {1: 3.0}, grace_period_s=60.0)
    p.awaiting([1, 2], {1: 4.0}, grace_period_s=60.0)
    p.awaiting([2], {}, grace_period_s=60.0)
    assert len(lines) == 2 and "1" in lines[0]
