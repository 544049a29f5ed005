"""A trial's curve as the ``history`` user attr, and back (dvt_hpo/results/curve.py)."""

from __future__ import annotations

import math

from dvt_hpo.results.curve import MAX_HISTORY_POINTS, curve_of_attr, history_attr


def test_history_attr_keeps_every_metric_and_thins_long_series_evenly() -> None:
    history = [(s, {"loss": float(s), "acc": s / 10}) for s in range(3)]
    assert history_attr(history) == {
        "loss": [[0, 0.0], [1, 1.0], [2, 2.0]],
        "acc": [[0, 0.0], [1, 0.1], [2, 0.2]],
    }
    long = [(s, {"loss": float(s)}) for s in range(2500)]
    points = history_attr(long)["loss"]
    assert len(points) == MAX_HISTORY_POINTS
    assert points[0] == [0, 0.0] and points[-1] == [2499, 2499.0]
    assert [p[0] for p in points] == sorted({p[0] for p in points})  # in order, no repeats
    assert history_attr([(0, {"loss": float("nan")})]) == {"loss": [[0, None]]}


def test_a_history_attr_reads_back_as_the_curve_it_was_made_of() -> None:
    curve = [(0, {"loss": 2.0, "acc": 0.1}), (1, {"loss": 1.0}), (3, {"acc": 0.5})]
    assert curve_of_attr(history_attr(curve)) == curve
    (point,) = curve_of_attr(history_attr([(0, {"loss": float("nan")})])) or []
    assert math.isnan(point[1]["loss"])


def test_an_attr_that_is_not_a_whole_curve_reads_as_none() -> None:
    assert curve_of_attr(None) is None
    assert curve_of_attr({}) is None
    assert curve_of_attr({"loss": "text"}) is None
    assert curve_of_attr({"loss": [[0.5, 1.0]]}) is None  # a step is an int
    thinned = history_attr([(s, {"loss": float(s)}) for s in range(2500)])
    assert curve_of_attr(thinned) is None  # steps were dropped: its value could differ
