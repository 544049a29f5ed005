"""A spent ``study.budget`` leaves no retry copy WAITING for ever.

A worker killed while the study's compute budget runs out leaves its trial RUNNING; the sweep
fails it for a retry and enqueues its WAITING copy. Once a limit of ``study.budget`` is spent no
worker launches anything, so that copy would wait for ever (and a later run with a larger
budget would run it first). The rule (docs/budgets.md): once the budget is spent, every
WAITING retry copy is **closed as over budget** (FAIL, ``dvt_hpo:over_budget``, user attrs
``status: over-budget`` and the limit that was spent), never run, and its chain's resume state
goes with it. Its interrupted attempt's compute was counted when it ran; the closed copy counts
for nothing (no epochs, no hours, not in ``n_trials``). Seeds enqueued by ``study.enqueue``
are not copies: they stay WAITING for a run with budget left.

:func:`copies_to_close` is the pure decision; :func:`close_copies` applies it. Each copy is
first claimed (WAITING -> RUNNING, the storage's own compare-and-set that ``ask`` uses), under
the study's retry lock, so a copy another worker took is never closed under it.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dvt_hpo.budget.trials import OVER_BUDGET_ATTR, limit_name
from dvt_hpo.optuna_api.private import set_trial_user_attrs, trial_id_of
from dvt_hpo.recovery import resume, retries

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec.model import StudySpec

__all__ = [
    "close_copies",
    "close_when_spent",
    "closed_line",
    "closed_reason",
    "copies_to_close",
]

Lock = Callable[[], contextlib.AbstractContextManager[Any]]


def copies_to_close(trials: Sequence[optuna.trial.FrozenTrial]) -> list[int]:
    """The numbers of the WAITING retry copies (a ``retry_history``): what a spent budget
    closes."""
    return [t.number for t in trials if t.state.name == "WAITING" and retries.retry_history(t)]


def closed_reason(why: str) -> str:
    """``study.budget.epochs=30 spent (31 epochs): closed before it ran``."""
    return f"{why}: closed before it ran"


def closed_line(why: str, numbers: Sequence[int]) -> str:
    """What the run says when it closed copies."""
    copies = "copy" if len(numbers) == 1 else "copies"
    listed = ", ".join(map(str, numbers))
    return f"{why}: retry {copies} of interrupted trials closed as over budget, never run: {listed}"


def close_copies(
    study: optuna.Study,
    storage: Any,
    why: str,
    *,
    lock: Lock = contextlib.nullcontext,
    on_closed: Callable[[optuna.trial.FrozenTrial], None] | None = None,
) -> list[int]:
    """Close every WAITING retry copy as over budget (``why``: the limit spent, as
    :func:`dvt_hpo.budget.compute.exhausted` says it); the numbers closed."""
    trials = study.get_trials(deepcopy=False)
    if not copies_to_close(trials):
        return []
    closed: list[int] = []
    limit = limit_name(why)
    with lock():
        by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
        for number in copies_to_close(list(by_number.values())):
            trial = by_number[number]
            trial_id = trial_id_of(trial)
            # The claim ask makes: False when another worker took it meanwhile.
            if not storage.set_trial_state_values(trial_id, retries.trial_state("RUNNING")):
                continue
            storage.set_trial_system_attr(trial_id, OVER_BUDGET_ATTR, True)
            attrs = {"status": "over-budget", "over_budget": limit, "reason": closed_reason(why)}
            set_trial_user_attrs(storage, trial_id, attrs)
            storage.set_trial_state_values(trial_id, retries.trial_state("FAIL"))
            closed.append(number)
            if on_closed is not None:
                on_closed(storage.get_trial(trial_id))
    return closed


def _dead_running(study: optuna.Study, storage: Any, study_lock: Lock, silent_s: float) -> bool:
    """Whether a RUNNING trial has had no heartbeat for ``silent_s`` (its worker is likely
    dead); a trial with none yet is being launched by a live worker."""
    with study_lock():
        running = study.get_trials(deepcopy=False, states=(retries.trial_state("RUNNING"),))
        ages = retries.heartbeat_ages(storage, running)
    return any(ages.get(t.number, 0.0) > silent_s for t in running)


def close_when_spent(
    why: str,
    study: optuna.Study,
    storage: Any,
    spec: StudySpec,
    *,
    sweep: Callable[[], None],
    study_lock: Lock,
    retry_lock: Lock,
) -> list[int]:
    """The worker's step before it leaves, once ``study.budget`` is spent (``why``: the
    spent limit, as :meth:`dvt_hpo.budget.compute.BudgetWatch.exhausted` says it): a sweep (a
    dead worker's stale trial gets its copy), then every copy closed and its chain's resume
    state deleted. The numbers closed, for the caller to say (:func:`closed_line`)."""
    section = spec.study
    interval_s = float(section.heartbeat_interval_s)
    sweep()
    # A dead worker's trial (no heartbeat for two intervals) is waited on until the sweep
    # fails it, so that its copy is closed now rather than left to the next run; the
    # stale rule is a clock, hence the polling. Live workers' trials are not waited on.
    deadline = time.monotonic() + section.grace_period_s + 2 * interval_s
    if _dead_running(study, storage, study_lock, -1.0):
        # A trial whose worker died a moment ago still looks alive: one heartbeat interval
        # and a half tells it from a live worker's, which has beaten again by then.
        time.sleep(1.5 * interval_s)
        sweep()
    while (
        _dead_running(study, storage, study_lock, 1.5 * interval_s) and time.monotonic() < deadline
    ):
        time.sleep(interval_s)
        sweep()
    with study_lock():
        return close_copies(
            study,
            storage,
            why,
            lock=retry_lock,
            on_closed=functools.partial(resume.closed_unrun, spec),
        )
