"""A trial that finished while its worker died is recorded as it finished, not run again.

The trial process writes ``result.json`` (atomically) before it exits; its worker then tells
Optuna. A worker killed in between (a node lost during a trainer's final step, after the
trial's last report) leaves a RUNNING trial whose result says ``ok``. The sweep
(:func:`dvt_hpo.recovery.retries.reconcile`) asks :func:`sweep_hook`'s function first: when the
result can be read from the shared runs folder and passes the same rule its worker applies
(:func:`dvt_hpo.results.outcome.classify` of an ``ok`` result, exit 0), the trial is recorded
COMPLETE with the value reduced from its curve, that curve and the attrs its worker would have
written; otherwise today's retry holds.

Who records it: the sweeper holding the study's retry lock (:func:`dvt_hpo.store.lock.retry_lock`,
the lock that already makes a retry's copy exactly one), after reading the trial again under it:
the next holder finds it COMPLETE and writes nothing. The lock is needed: Optuna's refusal to
update a finished trial is a compare-and-set on PostgreSQL (the row is read ``FOR UPDATE``) but
not on SQLite, whose driver reads the state outside the write's transaction (two sweepers were
seen both writing COMPLETE). A worker telling its own trial late (``skip_if_finished``) is
refused by the storage as before. Everything written before the state (attrs, the curve's
steps, constraints) is the same whoever writes it.

:func:`decide` is pure (what to record, from the result, the curve and the objective);
:func:`read` gathers its inputs; :func:`record` writes the decision.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dvt_hpo.optuna_api.private import set_trial_user_attrs, trial_id_of
from dvt_hpo.recovery import kill_points, resume
from dvt_hpo.results.curve import Curve, curve_of_attr, history_attr
from dvt_hpo.results.outcome import Flags, Objective, classify
from dvt_hpo.sampling.constraints import store_constraints
from dvt_hpo.wire.result import ResultError, TrialResult, read_result
from dvt_hpo.wire.trial_dir import TrialDir

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec.model import StudySpec

__all__ = [
    "RECORDED_BY",
    "Finished",
    "decide",
    "objective_of",
    "read",
    "record",
    "sweep_hook",
    "trial_dir",
]

# A context manager factory: the study's retry lock (dvt_hpo.store.lock.retry_lock).
Lock = Callable[[], contextlib.AbstractContextManager[Any]]
# The user attr that says a sweep, not the trial's own worker, recorded it.
RECORDED_BY = "recorded_by"


@dataclass(frozen=True)
class Finished:
    """What to record for a trial whose result says it finished."""

    values: tuple[float, ...]
    constraints: tuple[float, ...]
    curve: Curve
    attrs: dict[str, Any] = field(default_factory=dict)


def objective_of(spec: StudySpec) -> Objective:
    objective = spec.objective
    return Objective(
        objective.metric,
        objective.direction,
        objective.reduce,
        others=objective.names[1:],
        constraints=objective.constraints,
    )


def trial_dir(spec: StudySpec, number: int) -> Path:
    return TrialDir.of(spec.trials.runs_dir, number).path


def decide(
    result: TrialResult | None,
    rank_errors: Sequence[TrialResult],
    curve: Curve,
    objective: Objective,
) -> Finished | None:
    """What its worker would have recorded for a trial that wrote ``result``, reported
    ``curve`` and exited 0; ``None`` unless that is COMPLETE (no result, another status, a
    rank's error, a diverged or missing objective: the retry decides, as before)."""
    if result is None or result.status != "ok" or rank_errors:
        return None
    outcome = classify(result, 0, Flags(), objective=objective, history=curve)
    if outcome.state != "COMPLETE":
        return None
    attrs: dict[str, Any] = {
        "exit": "unknown (its worker died after the trial wrote its result)",
        "epochs_reported": len(curve),
        "status": "ok",
        RECORDED_BY: "sweep",
    }
    if result.duration_s is not None:
        attrs["duration_s"] = round(result.duration_s, 3)
    if result.startup_s is not None:
        attrs["startup_s"] = result.startup_s
    if result.metrics:
        attrs["final_metrics"] = result.metrics
    if curve:
        attrs["last_step"] = curve[-1][0]
        attrs["last_metrics"] = curve[-1][1]
        attrs["history"] = history_attr(curve)
    return Finished(outcome.values, outcome.constraints, list(curve), attrs)


def _stored_curve(spec: StudySpec, trial: optuna.trial.FrozenTrial) -> Curve | None:
    """The trial's curve: the ``history`` attr its worker stored (killed just before its
    tell), the chain's ``curve.json`` (``trials.resume``), or its stored intermediate values
    (one objective without constraints: every metric the rule needs is there)."""
    stored = curve_of_attr(trial.user_attrs.get("history"))
    if stored is not None:
        return stored
    if spec.trials.resume:
        return resume.chain_curve(spec, trial)
    objective = spec.objective
    if objective.is_multi or objective.constraints:
        return None
    return [(s, {objective.metric: v}) for s, v in sorted(trial.intermediate_values.items())]


def read(spec: StudySpec, trial: optuna.trial.FrozenTrial) -> Finished | None:
    """:func:`decide` for ``trial`` from its files in the runs folder (``None`` where they
    cannot be read)."""
    folder = TrialDir.of(spec.trials.runs_dir, trial.number)
    try:
        result = read_result(folder.result)
        if result is None:
            return None
        errors = [e for p in folder.rank_errors() if (e := read_result(p))]
    except (ResultError, OSError):
        return None
    curve = _stored_curve(spec, trial)
    if curve is None:
        return None
    return decide(result, errors, curve, objective_of(spec))


def record(
    storage: Any,
    trial: optuna.trial.FrozenTrial,
    finished: Finished,
    *,
    single_metric: str | None,
    lock: Lock = contextlib.nullcontext,
) -> bool:
    """Write ``finished`` for the RUNNING ``trial`` under the study's retry ``lock``; True
    when this call moved it to COMPLETE, False when it was finished already (by another
    sweeper, or its worker). TimeoutError when another worker holds the lock."""
    import optuna

    trial_id = trial_id_of(trial)
    with lock():
        # Read again under the lock: whoever held it before may have recorded it.
        if storage.get_trial(trial_id).state.name != "RUNNING":
            return False
        try:
            if single_metric is not None:
                for step, metrics in finished.curve:
                    value = metrics.get(single_metric)
                    known = step in trial.intermediate_values
                    if not known and value is not None and math.isfinite(value):
                        storage.set_trial_intermediate_value(trial_id, step, value)
            if finished.constraints:
                store_constraints(storage, trial_id, finished.constraints)
            set_trial_user_attrs(storage, trial_id, finished.attrs)
            kill_points.reached("finished:attrs")
            values = list(finished.values)
            return bool(storage.set_trial_state_values(trial_id, _complete(), values))
        except optuna.exceptions.UpdateFinishedTrialError:
            return False


def _complete() -> Any:
    from optuna.trial import TrialState

    return TrialState.COMPLETE


def sweep_hook(
    spec: StudySpec, lock: Lock = contextlib.nullcontext
) -> Callable[[optuna.Study, Any, optuna.trial.FrozenTrial], bool]:
    """``retries.reconcile``'s ``finished``: record a stale trial whose result says it
    finished. True: recorded (by this call or another), or left RUNNING for the next sweep
    because another worker holds ``lock`` (the study's retry lock); False: fail it for a retry
    as before. Its resume state and, by ``trials.keep_logs``, its folder go as its worker's
    record would remove them."""

    def finished(study: optuna.Study, storage: Any, trial: optuna.trial.FrozenTrial) -> bool:
        decision = read(spec, trial)
        if decision is None:
            return False
        single = None if spec.objective.is_multi else spec.objective.metric
        try:
            recorded = record(storage, trial, decision, single_metric=single, lock=lock)
        except TimeoutError:
            return True  # the lock's holder may be recording it: the next sweep looks again
        if recorded:
            resume.discard(resume.chain_dir(spec, resume.root_number(trial)))
            if spec.trials.keep_logs != "all":  # a COMPLETE trial's folder, as its worker does
                resume.discard(trial_dir(spec, trial.number))
        return recorded or storage.get_trial(trial_id_of(trial)).state.name == "COMPLETE"

    return finished
