"""A trial's life as the orchestrator sees it: its phases, and the pure rule for its outcome.

:func:`classify` turns what a finished trial left (the chief's result file, the other ranks'
error files, the exit status, the flags the orchestrator raised while it ran) into the state
Optuna records, the reason, and whether the attempt is retried. It does no I/O, so every rule
is tested as a table, without processes.

The rules, first match wins:

1. the trial spoke another protocol version: FAIL, not retried (rerunning cannot help);
2. it reported a NaN or infinite objective: FAIL "diverged at step k (metric=nan)"; the
   orchestrator stopped it at that report (a diverged run never recovers, and a NaN can
   neither be pruned on nor compared);
3. the study pruned it: PRUNED;
4. the chief wrote an ``ok`` result and the process exited 0 (or was stopped by us after it
   wrote it): COMPLETE, whatever the interrupt and timeout flags say; a finished trial is
   never thrown away ("completed trials are never touched"); a final objective that is NaN
   or infinite (no finite value reported) is FAIL "diverged", never "not reported"; its
   values and constraint values come from one epoch (:mod:`dvt_hpo.results.reduction`), and a
   constraint metric never reported is FAIL naming it;
5. the study was interrupted: FAIL, retried;
6. it ran past ``trials.timeout_s``: FAIL;
7. a rank raised: FAIL with the earliest error (under DDP the others often fail only because
   of it), out-of-memory as the trial process classified it;
8. otherwise: FAIL with the exit status.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from dvt_hpo.results.events import TrialFinished
from dvt_hpo.results.reduction import choose_epoch, reduce_trial
from dvt_hpo.sampling.constraints import feasible
from dvt_hpo.spec.model import ConstraintSpec
from dvt_hpo.wire.result import TrialResult

State = Literal["COMPLETE", "PRUNED", "FAIL"]
History = Sequence[tuple[int, Mapping[str, float]]]


class Phase(enum.Enum):
    """Where one trial is; :class:`~dvt_hpo.study.trial_run.TrialRun` moves through them in order."""

    ASKED = "asked"  # Optuna gave it a number and params; nothing started
    LAUNCHING = "launching"  # payload written, process starting
    RUNNING = "running"  # process alive, reports streaming
    STOPPING = "stopping"  # pruned, timed out or interrupted: its process group is stopped
    RECORDING = "recording"  # process gone: classifying and telling Optuna
    FINISHED = "finished"  # told; the slot is free


@dataclass(frozen=True)
class Flags:
    """What the orchestrator decided or saw while the trial ran."""

    pruned_step: int | None = None
    interrupted: bool = False
    timed_out: bool = False
    protocol_error: str | None = None
    diverged: tuple[int, float] | None = None  # (step, value): the first non-finite objective
    diverged_metric: str | None = None  # which objective (default: the first)


@dataclass(frozen=True)
class Objective:
    metric: str  # the first objective
    direction: Literal["minimize", "maximize"]
    reduce: Literal["best", "last"] = "best"
    others: tuple[str, ...] = ()  # the further objectives of a multi-objective study
    constraints: tuple[ConstraintSpec, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return (self.metric, *self.others)


@dataclass(frozen=True)
class Limits:
    """The limits a reason names when the trial hit one."""

    timeout_s: float | None = None
    memory_limit: int | None = None
    per_gpu: int = 1  # the trial ran in a 1/per_gpu share of its GPU


# A FAIL trial's ``status`` user attr when the user's stop (Ctrl-C, a signal) stopped it.
INTERRUPTED: Final = "interrupted"
# The ``status`` the loop hears of a trial another worker finished while it ran here (a sweep
# failed it as stale and queued its retry): this worker wrote nothing of it.
RECORDED_ELSEWHERE: Final = "recorded elsewhere"


@dataclass(frozen=True)
class Outcome:
    state: State
    status: Literal["ok", "pruned", "failed", "timeout", "interrupted"]
    value: float | None = None  # the first objective's
    reason: str | None = None
    retry: bool = False
    traceback: str | None = None
    values: tuple[float, ...] = ()  # every objective's (COMPLETE)
    constraints: tuple[float, ...] = ()  # Optuna's convention, <= 0 feasible (COMPLETE, PRUNED)


def describe_exit(returncode: int | None) -> str:
    from dvt_hpo.process.tree import describe_exit as describe

    return describe(returncode)


def pruned_reason(step: int, pruner: str | None = None) -> str:
    """``pruned at step 3 by MedianPruner`` (``pruner``: the study's ``study.pruner.kind``)."""
    from dvt_hpo.sampling.kinds import PRUNERS

    by = f" by {PRUNERS[pruner].class_name if pruner in PRUNERS else pruner}" if pruner else ""
    return f"pruned at step {step}{by}"


def reason_of(state: str, user_attrs: Mapping[str, Any]) -> str | None:
    """The reason a finished trial shows (report, status): its ``reason`` attr; a pruned trial
    recorded before it had one reads as pruned from its ``pruned_step``."""
    reason = user_attrs.get("reason")
    if isinstance(reason, str) and reason:
        return reason
    step = user_attrs.get("pruned_step")
    if state == "PRUNED" and isinstance(step, int):
        return pruned_reason(step)
    return None


def diverged_reason(step: int, metric: str, value: float) -> str:
    return f"diverged at step {step} ({metric}={value})"


def reduce_history(history: History, metric: str, direction: str, reduce: str) -> float | None:
    """The objective value from the per-step history: ``best`` (direction-aware) or ``last``,
    over the finite values (``None`` when there is none)."""
    chosen = choose_epoch(history, (metric,), direction, reduce)
    return None if chosen is None else float(history[chosen][1][metric])


def first_error(
    result: TrialResult | None, rank_errors: Sequence[TrialResult]
) -> TrialResult | None:
    """The earliest error of any rank: under DDP the chief often fails only because another
    rank died first, and the first failure is the cause."""
    errors = [r for r in (result, *rank_errors) if r is not None and r.failed]
    if not errors:
        return None
    return min(errors, key=lambda e: math.inf if e.time_unix is None else e.time_unix)


def classify(
    result: TrialResult | None,
    exit_status: int | None,
    flags: Flags,
    *,
    objective: Objective,
    history: History = (),
    rank_errors: Sequence[TrialResult] = (),
    limits: Limits = Limits(),
    pruner: str | None = None,
) -> Outcome:
    """The outcome of one finished trial process (see the module's rules); ``pruner``: the
    study's pruner kind, named in a pruned trial's reason."""
    if flags.protocol_error is not None:
        return Outcome("FAIL", "failed", reason=flags.protocol_error)
    if flags.diverged is not None:
        step, value = flags.diverged
        metric = flags.diverged_metric or objective.metric
        return Outcome("FAIL", "failed", reason=diverged_reason(step, metric, value))
    if flags.pruned_step is not None:
        pruned = reduce_trial(
            list(history),
            objective.names,
            objective.direction,
            objective.reduce,
            objective.constraints,
            need_objectives=False,
        )
        return Outcome(
            "PRUNED",
            "pruned",
            reason=pruned_reason(flags.pruned_step, pruner),
            constraints=pruned.constraints,
        )

    stopped_by_us = flags.interrupted or flags.timed_out
    if (
        result is not None
        and result.status == "ok"
        and not rank_errors
        and (exit_status == 0 or stopped_by_us)
    ):
        steps = list(history)
        if not steps and result.metrics:
            steps = [(0, result.metrics)]
        final = result.metrics
        reduced = reduce_trial(
            steps,
            objective.names,
            objective.direction,
            objective.reduce,
            objective.constraints,
            final,
        )
        if reduced.diverged is not None:
            step, metric, bad = reduced.diverged
            return Outcome("FAIL", "failed", reason=diverged_reason(step, metric, bad))
        if reduced.failure is not None:
            return Outcome("FAIL", "failed", reason=reduced.failure)
        return Outcome(
            "COMPLETE",
            "ok",
            value=reduced.values[0],
            values=reduced.values,
            constraints=reduced.constraints,
        )

    if flags.interrupted:
        return Outcome(
            "FAIL", INTERRUPTED, reason="interrupted (the study was stopped)", retry=True
        )
    if flags.timed_out:
        timeout = f"={limits.timeout_s:g}" if limits.timeout_s is not None else ""
        return Outcome("FAIL", "timeout", reason=f"timed out after trials.timeout_s{timeout} s")

    error = first_error(result, rank_errors)
    if error is not None:
        # A command's failure says it all in its reason.
        reason = error.reason or f"{error.exc_type or 'Error'}: {error.message or ''}".strip()
        if error.rank:
            reason = f"rank {error.rank}: {reason}"
        if limits.memory_limit and error.out_of_memory:
            reason += f" (trials.memory_limit={limits.memory_limit} bytes)"
        if limits.per_gpu > 1 and error.out_of_memory:
            reason += f" (trials.per_gpu={limits.per_gpu}: 1/{limits.per_gpu} of its GPU's memory)"
        return Outcome("FAIL", "failed", reason=reason, traceback=error.traceback)
    if exit_status != 0:
        return Outcome(
            "FAIL", "failed", reason=f"trial process ended with {describe_exit(exit_status)}"
        )
    return Outcome("FAIL", "failed", reason="trial process exited without writing a result")


@dataclass
class TrialOutcome:
    """What the study loop learns when a trial is over."""

    number: int
    trial_id: int
    state: str  # COMPLETE | PRUNED | FAIL
    value: float | None
    params: dict[str, Any]
    duration_s: float
    reason: str | None = None
    interrupted: bool = False
    batch_size: int | None = None
    user_attrs: dict[str, Any] = field(default_factory=dict)
    values: tuple[float, ...] = ()  # every objective's (COMPLETE)
    constraints: tuple[float, ...] = ()  # <= 0 feasible; () when unconstrained or failed
    machine: str | None = None  # failed of the machine: the kind (dvt_hpo.recovery.node_health)
    paused: bool = False  # PRUNED with its state kept to continue it (trials.pause)
    # The trial as the tell returned it (an optuna FrozenTrial, finished): the budget's ledger
    # records it without reading it again. None when it was failed for a retry instead.
    told: Any = None

    def event(self) -> TrialFinished:
        """What the loop's observers hear of it."""
        return TrialFinished(
            number=self.number,
            trial_id=self.trial_id,
            state=self.state,
            value=self.value,
            params=dict(self.params),
            reason=self.reason,
            duration_s=round(self.duration_s, 3),
            user_attrs=dict(self.user_attrs),
            values=self.values,
            feasible=(
                feasible(self.constraints)
                if self.constraints and self.state == "COMPLETE"
                else None
            ),
        )


def trial_state(name: str) -> Any:
    """Optuna's ``TrialState`` member by name, importing optuna only when a state is needed
    (``dvt-hpo --help`` and ``validate`` stay quick)."""
    from optuna.trial import TrialState

    return TrialState[name]


__all__ = [
    "INTERRUPTED",
    "RECORDED_ELSEWHERE",
    "trial_state",
    "Flags",
    "Limits",
    "Objective",
    "Outcome",
    "Phase",
    "TrialOutcome",
    "classify",
    "diverged_reason",
    "pruned_reason",
    "reason_of",
    "first_error",
    "reduce_history",
]
