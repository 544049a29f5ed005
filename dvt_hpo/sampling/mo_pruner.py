"""Pruning a study with several objectives: MO-ASHA's rung rule, decided on values dvt-hpo
stores itself.

Optuna cannot prune a multi-objective study: ``Trial.report`` and ``Trial.should_prune``
raise there. :class:`MOASHAPruner` keeps Optuna's pruner interface (``prune(study, trial)``)
but reads what :func:`report_and_prune` stored: each trial's objective values at the rungs it
reached, one trial system attr per rung (``dvt_hpo:mo_rung:<step>``), written to the study's
storage before the decision reads every trial's. Several workers on one database therefore
decide on the same stored values; as in any asynchronous successive halving, a decision sees
the trials that reached the rung before it.

The rule (MO-ASHA: Salinas et al., "A multi-objective perspective on jointly tuning hardware
and hyperparameters", NAS workshop at ICLR 2021; Schmucker et al. 2021; Syne Tune's
``MOASHA`` scheduler):

1. Rungs are at steps ``min_resource * reduction_factor ** (min_early_stopping_rate + k)``,
   ``k = 0, 1, ...`` (Optuna's successive-halving rungs), below ``max_resource`` (a trial is
   never stopped at its last step, as Syne Tune's scheduler never stops a trial at ``max_t``).
   A report at step ``s`` enters the highest rung ``<= s`` the trial has not entered yet;
   other reports decide nothing.
2. At its rung the trial is ranked among every trial recorded there (running, complete or
   pruned; failed attempts are left out, their retries count): feasible points first, by
   non-dominated front and, within a front, by crowding distance (NSGA-II's, larger first;
   boundary points first); infeasible points (a constraint violated at that step) after them,
   by how far they are from feasible. Ties are in the trial's favour.
3. The trial is stopped when its position ``p`` (0 for the first) among the ``n`` recorded
   points gives ``p / n > 1 / reduction_factor``, i.e. it is outside the top share. A rung
   holding fewer than ``min_trials`` other trials stops nothing.

Syne Tune ranks within a front with an epsilon-net; crowding distance is what Optuna's NSGA-II
uses and needs no random seed, so the decision is a function of the stored values alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna

from dvt_hpo.optuna_api.private import storage_of, trial_id_of
from dvt_hpo.sampling.constraints import constraint_value

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

    from dvt_hpo.spec.model import ConstraintSpec

__all__ = [
    "RUNG_ATTR_PREFIX",
    "MOASHAPruner",
    "crowding_distances",
    "is_kept",
    "nondominated_fronts",
    "position",
    "rung_values",
    "report_and_prune",
    "violation_of",
]

RUNG_ATTR_PREFIX = "dvt_hpo:mo_rung:"
# The trials whose rung values count: a FAIL attempt is retried as a copy, which counts instead.
_COUNTED = (
    optuna.trial.TrialState.RUNNING,
    optuna.trial.TrialState.COMPLETE,
    optuna.trial.TrialState.PRUNED,
)


def nondominated_fronts(points: np.ndarray) -> np.ndarray:
    """The front of each row of ``points`` (every objective minimized): 0 for the rows no
    other row dominates, 1 for those only front 0 dominates, and so on."""
    pts = np.asarray(points, dtype=np.float64)
    n = pts.shape[0]
    # dominated_by[i, j]: row j dominates row i (no worse anywhere, better somewhere).
    no_worse = np.all(pts[None, :, :] <= pts[:, None, :], axis=2)
    better = np.any(pts[None, :, :] < pts[:, None, :], axis=2)
    dominated_by = no_worse & better
    fronts = np.full(n, -1, dtype=np.int64)
    remaining = np.ones(n, dtype=bool)
    front = 0
    while remaining.any():
        current = remaining & ~np.any(dominated_by[:, remaining], axis=1)
        fronts[current] = front
        remaining &= ~current
        front += 1
    return fronts


def crowding_distances(points: np.ndarray) -> np.ndarray:
    """NSGA-II's crowding distance of each row of one front: the sum over objectives of the
    normalised gap between its two neighbours; the extremes of any objective get infinity."""
    pts = np.asarray(points, dtype=np.float64)
    n, k = pts.shape
    distance = np.zeros(n)
    if n <= 2:
        return np.full(n, np.inf)
    for j in range(k):
        order = np.argsort(pts[:, j], kind="stable")
        column = pts[order, j]
        span = column[-1] - column[0]
        distance[order[0]] = distance[order[-1]] = np.inf
        if span > 0:
            distance[order[1:-1]] += (column[2:] - column[:-2]) / span
    return distance


def position(points: np.ndarray, violations: np.ndarray, index: int) -> int:
    """How many rows rank strictly ahead of row ``index`` (see the module's rule, step 2)."""
    pts = np.asarray(points, dtype=np.float64)
    viol = np.asarray(violations, dtype=np.float64)
    feasible = viol <= 0
    if not feasible[index]:
        return int(np.count_nonzero(feasible) + np.count_nonzero(~feasible & (viol < viol[index])))
    rows = np.flatnonzero(feasible)
    at = int(np.flatnonzero(rows == index)[0])
    fronts = nondominated_fronts(pts[rows])
    mine = fronts[at]
    same = np.flatnonzero(fronts == mine)
    crowd = crowding_distances(pts[rows][same])
    my_crowd = crowd[int(np.flatnonzero(same == at)[0])]
    return int(np.count_nonzero(fronts < mine) + np.count_nonzero(crowd > my_crowd))


def is_kept(
    points: np.ndarray,
    index: int,
    reduction_factor: float,
    violations: np.ndarray | None = None,
    min_trials: int = 1,
) -> bool:
    """Whether row ``index`` survives its rung among ``points`` (every objective minimized)."""
    n = len(points)
    if n - 1 < min_trials:
        return True
    viol = np.zeros(n) if violations is None else np.asarray(violations, dtype=np.float64)
    return position(points, viol, index) / n <= 1.0 / reduction_factor


def violation_of(metrics: Mapping[str, float], constraints: Sequence[ConstraintSpec]) -> float:
    """How far one report is from feasible (0 when it is, or when a constraint's metric is not
    in this report: it cannot be held against the trial at this step)."""
    total = 0.0
    for constraint in constraints:
        value = metrics.get(constraint.metric)
        if value is not None and np.isfinite(value):
            total += max(0.0, constraint_value(constraint, float(value)))
    return total


def rung_values(trial: FrozenTrial, rung: int) -> tuple[list[float], float] | None:
    """The (values, violation) ``trial`` recorded at ``rung``, or None."""
    stored = trial.system_attrs.get(f"{RUNG_ATTR_PREFIX}{rung}")
    if not isinstance(stored, dict):
        return None
    return [float(v) for v in stored["values"]], float(stored.get("violation", 0.0))


class MOASHAPruner(optuna.pruners.BasePruner):
    """MO-ASHA's rung rule for studies with several objectives (see the module).

    ``min_resource``: the first rung's step; ``reduction_factor``: the growth of rungs and the
    inverse of the share kept at each; ``min_early_stopping_rate``: rungs skipped at the start;
    ``min_trials``: the other trials a rung must hold before it stops one (1: MO-ASHA's);
    ``max_resource``: the last step a trial reports, where no rung is (a trial that trained
    every epoch is never thrown away; None: no bound)."""

    def __init__(
        self,
        min_resource: int = 1,
        reduction_factor: float = 3,
        min_early_stopping_rate: int = 0,
        min_trials: int = 1,
        max_resource: int | None = None,
    ) -> None:
        if isinstance(min_resource, bool) or not isinstance(min_resource, int) or min_resource < 1:
            raise ValueError(f"min_resource must be an integer >= 1, got {min_resource!r}")
        if isinstance(reduction_factor, bool) or not reduction_factor > 1:
            raise ValueError(f"reduction_factor must be > 1, got {reduction_factor!r}")
        if min_early_stopping_rate < 0:
            raise ValueError(
                f"min_early_stopping_rate must be >= 0, got {min_early_stopping_rate!r}"
            )
        if min_trials < 1:
            raise ValueError(f"min_trials must be >= 1, got {min_trials!r}")
        if max_resource is not None and max_resource < 1:
            raise ValueError(f"max_resource must be >= 1 or null, got {max_resource!r}")
        self.max_resource = max_resource
        self.min_resource = min_resource
        self.reduction_factor = float(reduction_factor)
        self.min_early_stopping_rate = min_early_stopping_rate
        self.min_trials = min_trials

    def rung_at(self, step: int) -> int | None:
        """The highest rung step ``<= step`` and below ``max_resource`` (None before the first)."""
        rung = None
        k = self.min_early_stopping_rate
        top = step if self.max_resource is None else min(step, self.max_resource - 1)
        while (milestone := self.min_resource * self.reduction_factor**k) <= top:
            rung = int(milestone)
            k += 1
        return rung

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        """Decide at the highest rung ``trial`` recorded (False when it recorded none)."""
        rungs = [
            int(key[len(RUNG_ATTR_PREFIX) :])
            for key in trial.system_attrs
            if key.startswith(RUNG_ATTR_PREFIX)
        ]
        if not rungs:
            return False
        rung = max(rungs)
        signs = np.array(
            [-1.0 if d == optuna.study.StudyDirection.MAXIMIZE else 1.0 for d in study.directions]
        )
        points, violations, index = [], [], None
        for other in study.get_trials(deepcopy=False, states=_COUNTED):
            recorded = rung_values(other, rung)
            if recorded is None:
                continue
            if trial_id_of(other) == trial_id_of(trial):
                index = len(points)
            points.append(np.asarray(recorded[0]) * signs)
            violations.append(recorded[1])
        if index is None:  # the trial is no longer RUNNING: nothing left to stop
            return False
        return not is_kept(
            np.array(points), index, self.reduction_factor, np.array(violations), self.min_trials
        )


def report_and_prune(
    study: optuna.Study,
    trial_id: int,
    step: int,
    metrics: Mapping[str, float],
    names: Sequence[str],
    constraints: Sequence[ConstraintSpec] = (),
) -> bool:
    """Store the report's objective values if ``step`` enters a new rung, and decide there.

    A report missing an objective (or holding a non-finite one) enters no rung: it cannot be
    compared. The caller holds its study lock; the write lands in storage before the read.
    The record keeps its step, so a call retried through a storage outage decides again."""
    pruner: Any = study.pruner
    if not isinstance(pruner, MOASHAPruner):
        return False
    values = [metrics.get(name) for name in names]
    if any(v is None or not np.isfinite(float(v)) for v in values):
        return False
    rung = pruner.rung_at(int(step))
    if rung is None:
        return False
    storage = storage_of(study)
    key = f"{RUNG_ATTR_PREFIX}{rung}"
    stored = storage.get_trial_system_attrs(trial_id).get(key)
    if isinstance(stored, dict) and stored.get("step") != int(step):
        return False  # decided at the report that entered this rung
    if stored is None:
        record = {
            "values": [float(v) for v in values],  # type: ignore[arg-type]
            "violation": violation_of(metrics, constraints),
            "step": int(step),
        }
        storage.set_trial_system_attr(trial_id, key, record)
    # A stored record of this very step: the call is retried after a storage outage (a step
    # is reported once), and decides on what it stored the first time.
    return pruner.prune(study, storage.get_trial(trial_id))
