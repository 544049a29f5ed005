"""``study.plateau``: a run stops launching once its best value has stopped improving.

A pure rule over the values of this run's finished trials (complete or pruned, in the order
they finished; ``None`` for a pruned or infeasible one) and the study's best value before the
run: the run has reached a plateau when its last ``trials`` finished trials did not improve the
best value by more than ``min_delta``. Counting this run's trials only is what lets a rerun
with a larger budget resume: it gets ``trials`` new trials to improve before the rule can stop
it again. Failed and interrupted trials tell nothing about the objective and are not counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from dvt_hpo.sampling.constraints import feasible

if TYPE_CHECKING:
    from dvt_hpo.spec.model import StudySpec

__all__ = ["PlateauWatch", "plateau_message", "plateau_reached"]

Direction = Literal["minimize", "maximize"]


def _best(
    values: Sequence[float | None], start: float | None, direction: Direction
) -> float | None:
    best = start
    for value in values:
        if value is None:
            continue
        if best is None or (value > best if direction == "maximize" else value < best):
            best = value
    return best


def plateau_reached(
    values: Sequence[float | None],
    trials: int,
    min_delta: float,
    direction: Direction,
    prior_best: float | None = None,
) -> bool:
    """Whether the last ``trials`` of ``values`` improved the best by ``min_delta`` or less.

    Before ``trials`` trials of this run have finished, never. A best that did not exist before
    the window (no completed trial yet) and exists now is an improvement; with no value at all,
    there is nothing to judge and the run goes on.
    """
    if len(values) < trials:
        return False
    before = _best(values[: len(values) - trials], prior_best, direction)
    now = _best(values, prior_best, direction)
    if now is None:
        return False
    if before is None:
        return False
    gain = now - before if direction == "maximize" else before - now
    return gain <= min_delta


def plateau_message(trials: int, min_delta: float, best: float | None) -> str:
    """The line a run prints when the rule stops it (the run then exits 0)."""
    shown = "none" if best is None else f"{best:.6g}"
    return (
        f"study.plateau reached: the best value ({shown}) did not improve by more than "
        f"{min_delta:g} over the last {trials} finished trials; no new trials (a rerun "
        f"searches on, {trials} trials at least)"
    )


class PlateauWatch:
    """One run's view of ``study.plateau``: the study's best before the run, then each finished
    trial's value in the order the run records them."""

    def __init__(
        self, trials: int, min_delta: float, direction: Direction, prior_best: float | None
    ) -> None:
        self.trials = trials
        self.min_delta = min_delta
        self.direction = direction
        self.prior_best = prior_best
        self.values: list[float | None] = []
        self.reached = False  # the plateau was reached: the study is over (trials.pause)

    @classmethod
    def for_study(cls, spec: StudySpec, trials: Sequence[Any]) -> PlateauWatch:
        """The watch of a run of ``spec`` (``study.plateau`` set) on a study holding ``trials``:
        its baseline is the study's best feasible value before the run."""
        from dvt_hpo.results.front import select_best

        rule = spec.study.plateau
        assert rule is not None
        best = select_best(trials, spec.objective.directions)
        prior = best.trials[0].value if best.trials else None
        return cls(rule.trials, rule.min_delta, spec.objective.direction, prior)

    def finished(self, value: float | None) -> str | None:
        """Record a finished trial (``None``: pruned or infeasible); the message that stops the
        run when the plateau is reached, else ``None``."""
        self.values.append(value)
        if not plateau_reached(
            self.values, self.trials, self.min_delta, self.direction, self.prior_best
        ):
            return None
        self.reached = True
        return plateau_message(
            self.trials, self.min_delta, _best(self.values, self.prior_best, self.direction)
        )

    def trial_finished(
        self, state: str, value: float | None, constraints: Sequence[float] = ()
    ) -> str | None:
        """:meth:`finished` for a trial the run recorded: complete and pruned ones count (a
        pruned or infeasible one as ``None``), failed ones tell nothing and do not."""
        if state not in ("COMPLETE", "PRUNED"):
            return None
        if state != "COMPLETE" or (constraints and not feasible(constraints)):
            value = None
        return self.finished(value)
