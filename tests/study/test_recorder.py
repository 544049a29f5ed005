"""What a finished trial's record is made of: the attrs, a pure function of its outcome and of
what its run saw (the thinned history: tests/results/test_curve.py). The tell itself runs in every trial of the suite
(tests/study/test_loop.py, tests/study/test_trial_run.py)."""

from __future__ import annotations

from dvt_hpo.results.outcome import Outcome
from dvt_hpo.study.recorder import RunFacts, trial_attrs

HISTORY = [(0, {"loss": 2.0}), (1, {"loss": 1.0})]


def test_a_completed_trials_attrs() -> None:
    facts = RunFacts(duration_s=1.23456, returncode=0, history=HISTORY)
    attrs = trial_attrs(Outcome("COMPLETE", "ok", value=1.0), facts, {"startup_s": 0.5})
    assert attrs == {
        "startup_s": 0.5,
        "duration_s": 1.235,
        "exit": "exit code 0",
        "epochs_reported": 2,
        "status": "ok",
        "last_step": 1,
        "last_metrics": {"loss": 1.0},
        "history": {"loss": [[0, 2.0], [1, 1.0]]},
    }


def test_a_pruned_trial_says_its_step_and_exit() -> None:
    facts = RunFacts(duration_s=1.0, returncode=0, history=HISTORY, pruned_step=1)
    attrs = trial_attrs(Outcome("PRUNED", "pruned", reason="pruned at step 1"), facts)
    assert attrs["pruned_step"] == 1
    assert attrs["exit"] == "pruned (exit code 0)"
    assert attrs["reason"] == "pruned at step 1"


def test_a_failed_trial_keeps_the_tails_machine_and_budget() -> None:
    facts = RunFacts(
        duration_s=1.0,
        returncode=None,
        over_budget="study.budget.epochs=2 spent (2 epochs)",
        diverged_step=3,
        strays=[123],
        resumed={"resumed_epochs": 1, "redone_epochs": 0},
        machine="cuda",
        stderr_tail="x" * 9000,
    )
    outcome = Outcome("FAIL", "failed", reason="r" * 3000, traceback="t" * 9000)
    attrs = trial_attrs(outcome, facts)
    assert attrs["exit"] == "unknown"
    assert attrs["status"] == "over-budget"
    # The limit's name, as a closed retry copy's (docs/budgets.md).
    assert attrs["over_budget"] == "epochs"
    assert attrs["diverged_step"] == 3 and attrs["strays_stopped"] == [123]
    assert attrs["resumed_epochs"] == 1 and attrs["machine_failure"] == "cuda"
    assert len(attrs["reason"]) == 2000
    assert len(attrs["stderr_tail"]) == 8000 and len(attrs["traceback"]) == 8000


def test_a_strict_stop_keeps_the_limits_line_in_its_reason() -> None:
    line = "study.budget.hours=0.5 spent (0.51 hours)"
    facts = RunFacts(duration_s=1.0, returncode=0, pruned_step=2, over_budget=line)
    reason = f"stopped: {line} (study.budget.strict)"  # as TrialRun words it
    attrs = trial_attrs(Outcome("PRUNED", "pruned", reason=reason), facts)
    assert (attrs["status"], attrs["over_budget"], attrs["reason"]) == (
        "over-budget",
        "hours",
        reason,
    )


def test_an_over_budget_trial_that_completed_is_not_marked() -> None:
    facts = RunFacts(duration_s=1.0, returncode=0, over_budget="spent")
    attrs = trial_attrs(Outcome("COMPLETE", "ok", value=1.0), facts)
    assert attrs["status"] == "ok" and "over_budget" not in attrs
