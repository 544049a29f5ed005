"""Which points the multi-fidelity GP sees: every point of a small study, a bounded and
stratified subsample of a large one, each finished curve read once."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, TrialState

from dvt_hpo.sampling.mf_gp_codec import Codec
from dvt_hpo.sampling.mf_gp_points import CurveCache, _spread

X = FloatDistribution(0.0, 1.0)
CODEC = Codec({"x": X})


def _trial(number: int, x: float, curve: list[float], state: TrialState) -> FrozenTrial:
    trial = optuna.trial.create_trial(
        state=state,
        value=curve[-1] if state == TrialState.COMPLETE else None,
        params={"x": x},
        distributions={"x": X},
        intermediate_values=dict(enumerate(curve, 1)),
    )
    trial.number = number
    return trial


def _points(trials: list[FrozenTrial], cache: CurveCache | None = None, **limits: int):
    limits = {"max_points": 600, "max_fit_points": 300} | limits
    return (cache or CurveCache()).points("s", trials, CODEC, 1.0, **limits)


def test_a_small_study_keeps_every_rung_and_last_point_in_study_order() -> None:
    trials = [
        _trial(0, 0.2, [0.1 * e for e in range(1, 10)], TrialState.COMPLETE),  # 9 epochs
        _trial(1, 0.7, [0.3, 0.4, 0.5, 0.6], TrialState.PRUNED),  # stopped at epoch 4
    ]
    points = _points(trials)
    assert points is not None
    epochs = np.rint(np.exp(points.x[:, 1] * math.log(9))).astype(int).tolist()
    assert epochs == [1, 3, 9, 1, 3, 4]
    assert points.x[:, 0].tolist() == [0.2] * 3 + [0.7] * 3
    assert points.y.tolist() == pytest.approx([0.1, 0.3, 0.9, 0.3, 0.5, 0.6])
    assert np.array_equal(points.fit_x, points.x)  # under the fit's limit: the same points


def test_a_large_study_keeps_the_best_the_latest_and_a_spread_of_the_rest() -> None:
    rng = np.random.default_rng(0)
    trials = [
        _trial(
            i, float(rng.random()), list(rng.random(int(rng.integers(1, 30)))), TrialState.PRUNED
        )
        for i in range(2000)
    ]
    best = max(
        range(2000), key=lambda i: trials[i].intermediate_values[max(trials[i].intermediate_values)]
    )
    points = _points(trials, max_points=400, max_fit_points=150)
    assert points is not None
    assert len(points.y) == 400 and len(points.fit_y) == 150
    kept = {float(v) for v in points.x[:, 0]}
    assert trials[best].params["x"] in kept
    assert {t.params["x"] for t in trials[-20:]} <= kept  # the latest, whole
    spread = [i for i, t in enumerate(trials[:1800]) if t.params["x"] in kept]
    assert all(any(d * 180 <= i < (d + 1) * 180 for i in spread) for d in range(10))
    # Whole curves (their rungs and last point), not scattered points.
    rows = points.x[points.x[:, 0] == trials[best].params["x"]]
    assert len(rows) == len({1, 3, 9, 27} & set(trials[best].intermediate_values)) + (
        max(trials[best].intermediate_values) not in {1, 3, 9, 27}
    )
    again = _points(list(trials), max_points=400, max_fit_points=150)
    assert again is not None and np.array_equal(again.x, points.x)


def test_a_finished_curve_is_read_once_a_running_one_at_every_ask() -> None:
    cache = CurveCache()
    done = _trial(0, 0.1, [0.5, 0.6], TrialState.PRUNED)
    running = _trial(1, 0.9, [0.2], TrialState.RUNNING)
    _points([done, running], cache)
    # Finished trials never change in a study; here a changed copy shows what was read.
    changed = _trial(0, 0.1, [0.0, 0.0], TrialState.PRUNED)
    further = _trial(1, 0.9, [0.2, 0.8], TrialState.RUNNING)
    points = _points([changed, further], cache)
    assert points is not None
    assert points.y.tolist() == pytest.approx([0.5, 0.6, 0.2, 0.8])


def test_a_running_trial_without_reports_is_pending() -> None:
    trials = [
        _trial(0, 0.1, [0.5, 0.6], TrialState.PRUNED),
        _trial(1, 0.5, [0.7], TrialState.PRUNED),
        optuna.trial.create_trial(
            state=TrialState.RUNNING, params={"x": 0.3}, distributions={"x": X}
        ),
    ]
    points = _points(trials)
    assert points is not None and points.pending.tolist() == [[0.3]]


def test_a_budget_the_best_and_latest_curves_fill_leaves_nothing_to_spread() -> None:
    # Two long curves, a budget of 5: the best takes 1 point, the latest 1, none is left over.
    trials = [
        _trial(i, 0.1 + 0.5 * i, [0.1 * e for e in range(1, 30)], TrialState.PRUNED)
        for i in range(2)
    ]
    points = _points(trials, max_points=5, max_fit_points=5)
    assert points is not None and len(points.y) == 2
    assert _spread(0) == ()


@pytest.mark.parametrize("n", [1, 2, 7, 100, 1000])
def test_the_spread_order_covers_the_range_evenly(n: int) -> None:
    order = _spread(n)
    assert sorted(order) == list(range(n))
    for k in (8, 16, 32):
        if n >= 4 * k:
            ends = [-1, *sorted(order[:k]), n]
            assert max(b - a for a, b in zip(ends, ends[1:], strict=False)) <= 2 * n / k
