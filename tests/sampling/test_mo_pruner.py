"""The several-objectives pruner: its rule on points (fronts, crowding, the kept share), its
rungs, and its decisions on values stored in a real study (in memory and a SQLite file shared
by two workers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import optuna
import pytest

from dvt_hpo.sampling.mo_pruner import (
    RUNG_ATTR_PREFIX,
    MOASHAPruner,
    crowding_distances,
    is_kept,
    nondominated_fronts,
    position,
    report_and_prune,
    violation_of,
)
from dvt_hpo.spec.model import ConstraintSpec

NAMES = ("acc", "time")


def test_fronts_peel_the_dominated_points() -> None:
    # minimized: (1, 4), (2, 2), (4, 1) trade off; (3, 3) is dominated by (2, 2) only;
    # (5, 5) by every other point.
    points = np.array([[1, 4], [2, 2], [4, 1], [3, 3], [5, 5]])
    assert nondominated_fronts(points).tolist() == [0, 0, 0, 1, 2]


def test_equal_points_share_a_front() -> None:
    assert nondominated_fronts(np.array([[1, 1], [1, 1], [2, 2]])).tolist() == [0, 0, 1]


def test_fronts_match_optunas_sort() -> None:
    multi = pytest.importorskip("optuna.study._multi_objective")
    ranks = getattr(multi, "_fast_non_domination_rank", None)
    if ranks is None:
        pytest.skip("this Optuna has no _fast_non_domination_rank")
    rng = np.random.default_rng(0)
    for _ in range(20):
        points = np.round(rng.uniform(0, 1, size=(40, 3)), 1)  # with ties
        assert nondominated_fronts(points).tolist() == ranks(points).tolist()


def test_crowding_gives_the_extremes_infinity_and_the_crowded_the_least() -> None:
    front = np.array([[0.0, 10.0], [1.0, 9.0], [1.1, 8.9], [10.0, 0.0]])
    distance = crowding_distances(front)
    assert np.isinf(distance[0]) and np.isinf(distance[3])
    # (1, 9) and (1.1, 8.9) crowd each other: (1, 9)'s gap is 1.1/10 + 1.1/10 on each axis.
    assert distance[1] == pytest.approx(0.22)
    assert distance[2] == pytest.approx((10 - 1) / 10 + (9 - 0) / 10)
    assert np.isinf(crowding_distances(front[:2])).all()


def test_a_dominated_point_is_stopped_and_a_nondominated_one_kept() -> None:
    # Syne Tune's share: stopped when its position p among n has p / n > 1 / eta.
    others = [[0.1, 1.0], [0.2, 0.5], [0.5, 0.2]]
    dominated = np.array([*others, [0.6, 1.1]])
    assert not is_kept(dominated, 3, reduction_factor=3)
    front = np.array([*others, [0.05, 5.0]])  # the best first objective: an extreme of front 0
    assert is_kept(front, 3, reduction_factor=3)


def test_the_kept_share_follows_the_reduction_factor() -> None:
    # A chain: each point dominated by all before it, so the last has position n - 1.
    chain = np.array([[i, i] for i in range(6)], dtype=float)
    for n in range(1, 7):
        for eta in (2, 3, 4):
            kept = [is_kept(chain[:n], i, eta) for i in range(n)]
            assert kept == [i / n <= 1 / eta for i in range(n)], (n, eta)
    assert is_kept(chain[:1], 0, 3)  # the first at a rung continues


def test_min_trials_holds_the_first_decisions() -> None:
    chain = np.array([[0, 0], [1, 1], [2, 2]], dtype=float)
    assert not is_kept(chain[:2], 1, 3, min_trials=1)
    assert is_kept(chain[:2], 1, 3, min_trials=2)
    assert not is_kept(chain, 2, 3, min_trials=2)


def test_infeasible_points_rank_behind_every_feasible_one() -> None:
    points = np.array([[0.0, 0.0], [5.0, 5.0], [9.0, 9.0], [1.0, 1.0]])
    violations = np.array([2.0, 0.0, 0.0, 1.0])
    assert position(points, violations, 1) == 0  # the dominant point is infeasible
    assert position(points, violations, 2) == 1
    assert position(points, violations, 3) == 2  # the lesser violation first
    assert position(points, violations, 0) == 3


def test_violation_counts_reported_constraints_only() -> None:
    constraints = (ConstraintSpec("size", max=500.0), ConstraintSpec("recall", min=0.5))
    assert violation_of({"size": 700.0, "recall": 0.25}, constraints) == 200.25
    assert violation_of({"size": 100.0}, constraints) == 0.0


def test_rungs_are_successive_halvings_steps() -> None:
    pruner = MOASHAPruner(min_resource=2, reduction_factor=3)
    assert [pruner.rung_at(s) for s in (0, 1, 2, 5, 6, 17, 18, 100)] == [
        None, None, 2, 2, 6, 6, 18, 54,
    ]  # fmt: skip
    # No rung at or past max_resource (the last step): steps 17 and 100 stay at rung 6.
    bounded = MOASHAPruner(min_resource=2, reduction_factor=3, max_resource=18)
    assert [bounded.rung_at(s) for s in (2, 17, 18, 100)] == [2, 6, 6, 6]
    assert MOASHAPruner(min_early_stopping_rate=1).rung_at(2) is None
    assert MOASHAPruner(min_early_stopping_rate=1).rung_at(3) == 3


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_resource": 0},
        {"reduction_factor": 1},
        {"min_trials": 0},
        {"min_resource": 1.5},
        {"max_resource": 0},
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        MOASHAPruner(**kwargs)  # type: ignore[arg-type]


def _study(storage: str | None = None, name: str = "mo") -> optuna.Study:
    return optuna.create_study(
        study_name=name,
        storage=storage,
        directions=["maximize", "minimize"],
        pruner=MOASHAPruner(min_resource=1, reduction_factor=3),
        load_if_exists=True,
    )


def _curve(study: optuna.Study, acc: float, time: float, epochs: int = 3) -> int | None:
    """Report a trial's epochs (acc flat, time growing) until pruned: the pruned step."""
    trial = study.ask()
    for step in range(1, epochs + 1):
        metrics = {"acc": acc, "time": time * step}
        if report_and_prune(study, trial._trial_id, step, metrics, NAMES):
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return step
    study.tell(trial, [acc, time * epochs])
    return None


def test_dominated_curves_are_pruned_at_their_first_rung() -> None:
    study = _study()
    assert _curve(study, 0.9, 1.0) is None  # alone at rung 1
    assert _curve(study, 0.5, 2.0) == 1  # worse on both: position 1 of 2
    assert _curve(study, 0.95, 3.0) is None  # best accuracy: on the front, an extreme
    assert _curve(study, 0.4, 4.0) == 1
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE", "PRUNED", "COMPLETE", "PRUNED"]
    # Every trial recorded its rungs 1 and 3 (pruned ones only their first).
    rungs = [
        sorted(k for k in t.system_attrs if k.startswith(RUNG_ATTR_PREFIX)) for t in study.trials
    ]
    assert rungs[0] == [f"{RUNG_ATTR_PREFIX}1", f"{RUNG_ATTR_PREFIX}3"]
    assert rungs[1] == [f"{RUNG_ATTR_PREFIX}1"]


def test_a_rung_decides_once_and_steps_between_rungs_decide_nothing() -> None:
    study = _study()
    _curve(study, 0.9, 1.0, epochs=1)
    trial = study.ask()
    tid = trial._trial_id
    assert report_and_prune(study, tid, 1, {"acc": 0.1, "time": 9.0}, NAMES)
    # Step 2 enters no new rung (rung 1 was entered at step 1): no second decision there.
    assert not report_and_prune(study, tid, 2, {"acc": 0.1, "time": 18.0}, NAMES)


def test_a_call_retried_after_an_outage_decides_on_what_it_stored() -> None:
    study = _study()
    _curve(study, 0.9, 1.0, epochs=1)
    tid = study.ask()._trial_id
    assert report_and_prune(study, tid, 1, {"acc": 0.1, "time": 9.0}, NAMES)
    # The same report again (the first call's write landed, its answer was lost).
    assert report_and_prune(study, tid, 1, {"acc": 0.1, "time": 9.0}, NAMES)
    stored = study.trials[-1].system_attrs[f"{RUNG_ATTR_PREFIX}1"]
    assert stored == {"values": [0.1, 9.0], "violation": 0.0, "step": 1}


def test_a_report_missing_an_objective_enters_no_rung() -> None:
    study = _study()
    _curve(study, 0.9, 1.0, epochs=1)
    trial = study.ask()
    assert not report_and_prune(study, trial._trial_id, 1, {"acc": 0.1}, NAMES)
    assert not report_and_prune(
        study, trial._trial_id, 1, {"acc": 0.1, "time": float("nan")}, NAMES
    )
    assert not any(k.startswith(RUNG_ATTR_PREFIX) for k in study.trials[-1].system_attrs)


def test_a_trial_that_skips_rungs_enters_the_highest_it_passed() -> None:
    study = _study()
    trial = study.ask()
    report_and_prune(study, trial._trial_id, 4, {"acc": 0.5, "time": 1.0}, NAMES)
    assert f"{RUNG_ATTR_PREFIX}3" in study.trials[0].system_attrs
    assert f"{RUNG_ATTR_PREFIX}1" not in study.trials[0].system_attrs


def test_failed_attempts_do_not_count() -> None:
    study = _study()
    trial = study.ask()
    report_and_prune(study, trial._trial_id, 1, {"acc": 0.99, "time": 0.1}, NAMES)
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    assert _curve(study, 0.5, 2.0, epochs=1) is None  # alone among the counted


def test_another_pruner_decides_nothing() -> None:
    study = optuna.create_study(directions=["maximize", "minimize"])
    trial = study.ask()
    assert not report_and_prune(study, trial._trial_id, 1, {"acc": 0.1, "time": 1.0}, NAMES)


def test_workers_on_one_database_decide_on_each_others_values(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'mo.db'}"
    first, second = _study(url), _study(url)  # two orchestrators, one study
    a, b = first.ask(), second.ask()
    assert not report_and_prune(first, a._trial_id, 1, {"acc": 0.9, "time": 1.0}, NAMES)
    # b is dominated by a, which only the first worker reported: the second sees it stored.
    assert report_and_prune(second, b._trial_id, 1, {"acc": 0.5, "time": 2.0}, NAMES)
    c = second.ask()
    assert not report_and_prune(second, c._trial_id, 1, {"acc": 0.95, "time": 3.0}, NAMES)
