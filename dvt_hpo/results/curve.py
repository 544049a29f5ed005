"""A trial's curve as the ``history`` user attr stores it, and back.

The worker that records a trial writes it (:func:`history_attr`); a sweep that records the
trial of a dead worker writes the same attr from the same curve, and reads one back
(:func:`curve_of_attr`) when the dead worker had stored it before it was killed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# Per metric, at most this many [step, value] points in the ``history`` user attr: Optuna
# stores user attrs as JSON text, and the dashboard draws a curve, not a log.
MAX_HISTORY_POINTS = 1000

Curve = list[tuple[int, dict[str, float]]]


def history_attr(
    history: list[tuple[int, dict[str, float]]], limit: int = MAX_HISTORY_POINTS
) -> dict[str, list[list[float]]]:
    """``{metric: [[step, value], ...]}``; a metric with more than ``limit`` points keeps
    ``limit`` of them evenly spread, the first and the last included."""
    series: dict[str, list[list[float]]] = {}
    for step, metrics in history:
        for name, value in metrics.items():
            # JSON has no NaN: a diverged value is kept as None.
            point = None if isinstance(value, float) and not math.isfinite(value) else value
            series.setdefault(name, []).append([step, point])  # type: ignore[list-item]
    for name, points in series.items():
        if len(points) > limit:
            last = len(points) - 1
            series[name] = [points[round(i * last / (limit - 1))] for i in range(limit)]
    return series


def curve_of_attr(attr: Any) -> Curve | None:
    """The curve a ``history`` attr holds (``None`` when it is not one, or was thinned: a
    thinned attr has lost steps, and a value reduced from it could differ)."""
    if not isinstance(attr, Mapping) or not attr:
        return None
    steps: dict[int, dict[str, float]] = {}
    for name, points in attr.items():
        if not isinstance(points, list) or len(points) >= MAX_HISTORY_POINTS:
            return None
        for point in points:
            if not (isinstance(point, list) and len(point) == 2 and isinstance(point[0], int)):
                return None
            value = point[1]
            steps.setdefault(point[0], {})[str(name)] = math.nan if value is None else float(value)
    return sorted(steps.items())


__all__ = ["MAX_HISTORY_POINTS", "Curve", "curve_of_attr", "history_attr"]
