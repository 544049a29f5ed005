"""Which trials count towards ``study.n_trials``: one rule for ``run`` (its ledger and summary)
and ``status``.

Every trial counts except:

- a FAIL that a retry copy supersedes: the copy (Optuna's retry callback lists the attempts it
  retries in its ``retry_history`` system attr; ``run --retry-failed`` and the stale-heartbeat
  rule both make one) takes its place, so retrying never spends more of the budget;
- a trial closed as over budget (:data:`OVER_BUDGET_ATTR`): asked for by a worker that lost a
  race for the last trial of the budget and closed at once without running;
- a PRUNED trial paused with its state kept (``trials.pause``) that a continuation supersedes:
  the continuation carries its curve on, and a paused trial and its continuations are one trial;
- a trial copied from an earlier study (:data:`PRIOR_ATTR`, ``study.warm_start.copy_results``):
  prior knowledge for the sampler, run by another study.

So after ``run --retry-failed`` of 2 failures in a 2-trial study, the 2 copies are the 2
trials: ``run`` says "2/2 trials; nothing to run" and ``status`` "2/2 trials finished".

Pure (stdlib only): callers read the states and attrs their own way (the run's incremental
ledger, ``status``'s few queries) and ask this module what counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "OVER_BUDGET_ATTR",
    "PRIOR_ATTR",
    "RETRY_ATTR",
    "RETRY_HISTORY_ATTR",
    "Attempt",
    "first_superseding",
    "limit_name",
    "uncounted",
    "uncounted_attempts",
    "within_retries",
]

OVER_BUDGET_ATTR = "dvt_hpo:over_budget"  # closed at once: asked past the budget by a race


def limit_name(why: str) -> str:
    """``hours`` of ``study.budget.hours=0.5 spent (0.5 hours)``: a trial's ``over_budget``
    user attr, one word to filter on whether the trial was stopped or its copy closed (the
    whole line goes in its ``reason``)."""
    return why.split("=", 1)[0].removeprefix("study.budget.").strip()


# Set on a trial copied from an earlier study (its "study#number"): never counted, never run.
PRIOR_ATTR = "dvt_hpo:prior"
RETRY_HISTORY_ATTR = "retry_history"  # Optuna's retry callback: the attempts a copy retries
# Set on an attempt, to its own number, before it is failed for a retry
# (dvt_hpo.recovery.retries.fail_attempt). The number (not True) because Optuna's retry callback
# copies system attrs onto the copy: a copy never matches.
RETRY_ATTR = "dvt_hpo:retry"

NOT_COUNTED_RETRIED = "failed and retried"
NOT_COUNTED_OVER_BUDGET = "over budget"
NOT_COUNTED_PRIOR = "copied from an earlier study"
NOT_COUNTED_PAUSED = "paused and continued"


@dataclass(frozen=True)
class Attempt:
    """What the rule reads of one trial."""

    number: int
    state: str  # COMPLETE | PRUNED | FAIL | RUNNING | WAITING
    over_budget: bool = False
    retries: tuple[int, ...] = ()  # its retry_history: the earlier attempts it retries
    prior: bool = False  # copied from an earlier study (PRIOR_ATTR)
    paused: bool = False  # PRUNED with its state kept for a continuation (trials.pause)


def first_superseding(attempts: Iterable[Attempt]) -> dict[int, int]:
    """For each retried attempt, the number of the first copy that retries it."""
    by: dict[int, int] = {}
    for attempt in sorted(attempts, key=lambda a: a.number):
        for earlier in attempt.retries:
            by.setdefault(earlier, attempt.number)
    return by


def uncounted(
    failed: Iterable[int],
    over_budget: Iterable[int],
    superseded_by: Mapping[int, int],
    *,
    below: int | None = None,
    prior: Iterable[int] = (),
    paused: Iterable[int] = (),
) -> dict[int, str]:
    """The trials that do not count, with why: ``over_budget`` ones, ``failed`` and ``paused``
    ones a copy supersedes, and ``prior`` ones (copied from an earlier study). With ``below`` only trials numbered below it are considered, and a FAIL counts
    as superseded only by a copy numbered below it too (the budget as it stood then)."""

    def within(number: int) -> bool:
        return below is None or number < below

    out = {n: NOT_COUNTED_OVER_BUDGET for n in over_budget if within(n)}
    out.update({n: NOT_COUNTED_PRIOR for n in prior if within(n)})
    for numbers, why in ((failed, NOT_COUNTED_RETRIED), (paused, NOT_COUNTED_PAUSED)):
        for n in numbers:
            copy = superseded_by.get(n)
            if within(n) and n not in out and copy is not None and within(copy):
                out[n] = why
    return out


def uncounted_attempts(attempts: Iterable[Attempt]) -> dict[int, str]:
    """:func:`uncounted` over whole attempts."""
    attempts = list(attempts)
    return uncounted(
        (a.number for a in attempts if a.state == "FAIL"),
        (a.number for a in attempts if a.over_budget),
        first_superseding(attempts),
        prior=(a.number for a in attempts if a.prior),
        paused=(a.number for a in attempts if a.paused and a.state == "PRUNED"),
    )


def within_retries(
    *, copies: int, machine_copies: int, machine: bool, max_retries: int, pauses: int = 0
) -> bool:
    """Whether a marked attempt gets a copy: one that failed of the machine always (its
    worker decided, within the machine limit); another while its chain made fewer than
    ``max_retries`` copies for reasons other than the machine and a pause (``pauses``: the
    continuations of paused attempts in its chain, ``trials.pause``)."""
    return machine or copies - machine_copies - pauses < max_retries
