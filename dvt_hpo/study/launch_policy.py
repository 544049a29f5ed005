"""Whether the loop starts another trial: one policy over ``study.timeout_s``, the caller's
launch gate (a Slurm job's time limit), ``study.budget`` and the trials of other workers.

Each rule answers and the policy applies: the budget returns a
:class:`~dvt_hpo.budget.compute.BudgetDecision` (a refusal and, when strict, the trials to stop),
and the policy stops those running trials itself. Once launching stops it never starts again in
this run; the loop then waits for its running trials.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from dvt_hpo.study import messages as run_messages

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.budget.compute import BudgetWatch

__all__ = ["FOREIGN_POLL_S", "LaunchPolicy", "Stoppable"]

# How often a run with no trial of its own running re-reads the study while other workers'
# trials run (one small query of the unfinished trials).
FOREIGN_POLL_S = 1.0


class Stoppable(Protocol):
    """A running trial as the policy sees it (:class:`~dvt_hpo.study.trial_run.TrialRun`)."""

    def stop_over_budget(self, why: str) -> None: ...


class LaunchPolicy:
    """The loop's one answer to "launch another trial?", and how long it waits otherwise.

    ``running`` is the loop's map of its running trials (read, never changed here); ``ended`` is
    set when the loop ends (its heartbeat's event), which ends the strict budget's watch too.
    """

    def __init__(
        self,
        *,
        timeout_s: float | None,
        gate: Callable[[optuna.Study], str | None] | None,
        budget: BudgetWatch | None,
        running: Mapping[int, Stoppable],
        heartbeat_interval_s: float,
        ended: threading.Event,
        out: Callable[[str], None],
    ) -> None:
        self.launching = True
        self.deadline = time.monotonic() + timeout_s if timeout_s is not None else None
        self._timeout_s = timeout_s
        self._gate = gate
        self._budget = budget
        self._running = running
        self._interval_s = float(heartbeat_interval_s)
        self._ended = ended
        self._out = out
        self._watching = False
        self._awaited: tuple[int, ...] = ()

    def stop(self) -> None:
        """No new trials from now on (a stopping rule, the plateau, a broken node)."""
        self.launching = False

    def check(self, study: optuna.Study, free_slots: bool) -> None:
        """Before launching: the deadline, then (with a free slot) the caller's gate and the
        budget's; the first that refuses stops launching, said once."""
        if not self.launching:
            return
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.launching = False
            self._out(f"study.timeout_s={self._timeout_s:g} reached: no new trials")
            return
        if not free_slots:
            return
        refused = self._gate(study) if self._gate is not None else None
        if refused is None and self._budget is not None:
            refused = self._ask_budget()
        if refused is not None:
            self.launching = False
            self._out(refused)

    def _ask_budget(self) -> str | None:
        assert self._budget is not None
        if self._budget.strict and not self._watching:
            self._watching = True
            threading.Thread(target=self._watch_strict, name="budget", daemon=True).start()
        decision = self._budget.decide(list(self._running))
        self._stop(decision.stop, decision.why)
        return decision.refused

    def _stop(self, numbers: frozenset[int], why: str | None) -> None:
        for number in numbers:
            run = self._running.get(number)
            if run is not None and why is not None:
                run.stop_over_budget(why)

    def _watch_strict(self) -> None:
        """A strict budget, every heartbeat interval while the loop runs: stops the running
        trials once it is spent (for trials that report rarely or never)."""
        assert self._budget is not None
        while not self._ended.wait(self._interval_s):
            with contextlib.suppress(Exception):  # a lost database: the loop says so
                decision = self._budget.decide(list(self._running))
                if decision.why is not None:
                    self._stop(decision.stop, decision.why)
                    return

    def wait_s(self, *, only_foreign: bool) -> float:
        """How long the loop waits for an outcome before it looks again: a heartbeat interval
        (retries enqueued by the heartbeat's sweep are noticed), about a second while only other
        workers' trials run (a worker with nothing left exits then), never past the deadline."""
        wait_s = self._interval_s
        if self.launching and only_foreign:
            wait_s = min(wait_s, FOREIGN_POLL_S)
        if self.launching and self.deadline is not None:
            wait_s = min(wait_s, max(0.0, self.deadline - time.monotonic()))
        return wait_s

    def awaiting(
        self,
        numbers: Sequence[int],
        ages: Mapping[int, float],
        *,
        grace_period_s: float,
    ) -> None:
        """Say once per set of trials which RUNNING trials of other (or dead) workers this run
        waits on, their heartbeat age and the longest wait before they are retried."""
        numbers = tuple(numbers)
        if numbers and numbers != self._awaited:
            self._out(
                run_messages.waiting_line(
                    numbers,
                    ages,
                    grace_period_s=grace_period_s,
                    heartbeat_interval_s=self._interval_s,
                )
            )
        self._awaited = numbers
