"""The best of a study: the best FEASIBLE trial (one objective) or the feasible Pareto front
(several), and, when no complete trial is feasible, the one closest to it.

Every command that shows a "best" (``best``, ``status``, ``report``, the run's summary, the
study-ended event) goes through :func:`select_best`, so none presents an infeasible trial as
best and none calls ``Study.best_trial``, which raises on multi-objective studies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dvt_hpo.results.events import StudyEnded
from dvt_hpo.sampling.constraints import constraints_of, is_feasible, violation

__all__ = [
    "Best",
    "no_feasible_message",
    "pareto_front",
    "select_best",
    "study_ended",
    "violations",
]


@dataclass(frozen=True)
class Best:
    trials: tuple[Any, ...]  # FrozenTrials: the best one, or the front best first
    n_complete: int
    closest: Any | None = None  # no feasible trial: the complete one least in violation

    @property
    def none_feasible(self) -> bool:
        return self.n_complete > 0 and not self.trials


def _signed(trial: Any, directions: Sequence[str]) -> tuple[float, ...]:
    """The trial's values turned so that lower is better for each."""
    return tuple(
        v if d == "minimize" else -v for v, d in zip(trial.values, directions, strict=True)
    )


def _dominates(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return all(x <= y for x, y in zip(a, b, strict=True)) and a != b


def pareto_front(trials: Sequence[Any], directions: Sequence[str]) -> list[Any]:
    """The trials no other trial dominates, best first on the first objective (then the next,
    then the trial number): the order a trade-off is read in. Sorted on the turned values
    first, a trial can only be dominated by one before it, so each is compared with the front
    found so far (not with every trial)."""
    ranked = sorted(trials, key=lambda t: (_signed(t, directions), t.number))
    front: list[tuple[tuple[float, ...], Any]] = []
    for trial in ranked:
        signed = _signed(trial, directions)
        # Equal values do not dominate each other: both stay on the front.
        if not any(_dominates(kept, signed) for kept, _ in front):
            front.append((signed, trial))
    return [t for _, t in front]


def select_best(trials: Sequence[Any], directions: Sequence[str]) -> Best:
    """``trials``: the study's COMPLETE trials (others are ignored)."""
    complete = [t for t in trials if t.state.name == "COMPLETE" and t.values is not None]
    feasible = [t for t in complete if is_feasible(t.system_attrs)]
    closest = None
    if complete and not feasible:
        closest = min(complete, key=lambda t: (violation(t.system_attrs), t.number))
    if not feasible:
        return Best((), len(complete), closest)
    if len(directions) == 1:
        sign = 1.0 if directions[0] == "minimize" else -1.0
        best = min(feasible, key=lambda t: (sign * t.values[0], t.number))
        return Best((best,), len(complete))
    return Best(tuple(pareto_front(feasible, directions)), len(complete))


def study_ended(trials: Sequence[Any], directions: Sequence[str], exit_code: int) -> StudyEnded:
    """What observers hear when a run ends: trials done (complete or pruned), and the best
    trial (one objective) or the feasible front's numbers (several)."""
    done = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    best = select_best([t for t in trials if t.state.name == "COMPLETE"], directions)
    if len(directions) > 1:
        front = tuple(t.number for t in best.trials)
        return StudyEnded(len(done), None, None, None, exit_code, front)
    if not best.trials:
        return StudyEnded(len(done), None, None, None, exit_code)
    top = best.trials[0]
    return StudyEnded(len(done), top.value, dict(top.params), top.number, exit_code)


def no_feasible_message(best: Best, study: str, constraints: Sequence[str] = ()) -> str:
    """One line: no complete trial meets the constraints; the closest one and by how much
    (``constraints``: the constraint metrics, to name each value)."""
    closest = best.closest
    text = (
        f"study {study!r} has {best.n_complete} complete trial(s) and none meets "
        "objective.constraints"
    )
    if closest is not None:
        text += f"; the closest is trial {closest.number} ({violations(closest, constraints)})"
    return text


def violations(trial: Any, constraints: Sequence[str] = ()) -> str:
    """``n_params over by 1.6e+04, ...``: the constraints ``trial`` does not meet
    (``constraints``: the constraint metrics, to name each value)."""
    values = constraints_of(trial.system_attrs) or ()
    names = list(constraints) if len(constraints) == len(values) else list(range(len(values)))
    return ", ".join(f"{n} over by {v:.6g}" for n, v in zip(names, values, strict=True) if v > 0)
