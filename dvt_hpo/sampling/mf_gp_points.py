"""Which points of a study the multi-fidelity GP sees: each finished trial's curve read once per
process, and past a size a bounded subsample that is the same on every machine.

A GP's cost grows with the cube of its points, and a study of thousands of trials holds ten
thousand and more. Past ``max_points`` the model keeps whole curves of (1) the best trials by
their last value, up to a quarter of the points, where the acquisition looks hardest; (2) the
latest trials, up to half, what the search is doing now; (3) the others spread evenly over the
study's history (a bit-reversed order of their numbers, so any count of them is stratified).
The kernel's hyperparameters are fitted on a smaller subsample chosen the same way: they settle
long before the data ends, and the fit costs about 50 factorizations where an ask costs one.
The choice depends only on the trials' numbers and values, never on timing or on dict order.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from optuna.trial import FrozenTrial, TrialState

__all__ = ["CurveCache", "Points"]


class _Codec(Protocol):
    """Params to a row of the unit cube (dvt_hpo.sampling.mf_gp_codec)."""

    width: int
    key: tuple[object, ...]

    def encode(self, params: dict[str, Any]) -> np.ndarray | None: ...


# A curve: (epoch counted from 1, value signed so that higher is better), epochs ascending.
_Curve = tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class Points:
    """Model inputs (the config in the unit cube, then log epoch over log of the last epoch),
    values signed so that higher is better, the rows the hyperparameters are fitted on, the
    configs of trials running without a report yet, and the steps of the first and the last
    epoch any trial reported."""

    x: np.ndarray
    y: np.ndarray
    fit_x: np.ndarray
    fit_y: np.ndarray
    pending: np.ndarray
    first_step: int
    last_step: int


class CurveCache:
    """Each finished trial's steps and curve, computed once: a finished trial never changes, so
    an ask costs a dictionary look-up per stored trial rather than a pass over its reports."""

    def __init__(self) -> None:
        self._steps: dict[tuple[str, int], tuple[int, int] | None] = {}
        self._key: tuple[object, ...] | None = None
        self._curves: dict[int, tuple[np.ndarray, _Curve] | None] = {}

    def points(
        self,
        study_name: str,
        trials: Sequence[FrozenTrial],
        codec: _Codec,
        sign: float,
        *,
        max_points: int,
        max_fit_points: int,
    ) -> Points | None:
        """The points of ``trials`` (in study order) for ``codec``'s space; None under two.

        Steps count as epochs from the first step any trial reported (0 or 1, as trainers
        count): epoch = step - first + 1. A trial contributes its value at epochs 1, 3, 9, 27,
        ... and at its last report: enough of a curve for the model's epoch length scale, and a
        few points a trial whatever its length. A complete trial's value counts at the last
        epoch any trial reached (the fidelity the acquisition asks about)."""
        ranges = [self._step_range(study_name, t) for t in trials]
        reported = [r for r in ranges if r is not None]
        first = min((r[0] for r in reported), default=1)
        top = max((r[1] for r in reported), default=first) - first + 1
        key = (study_name, codec.key, first, top, sign)
        if key != self._key:
            self._key, self._curves = key, {}
        configs: list[np.ndarray] = []
        curves: list[_Curve] = []
        pending: list[np.ndarray] = []
        for t in trials:
            if t.state.is_finished():
                if t.number not in self._curves:
                    self._curves[t.number] = _curve(t, codec, sign, first, top)
                entry = self._curves[t.number]
            else:
                entry = _curve(t, codec, sign, first, top)
                if entry is not None and not entry[1]:
                    pending.append(entry[0])
            if entry is not None and entry[1]:
                configs.append(entry[0])
                curves.append(entry[1])
        log_top = math.log(top) if top > 1 else 0.0
        x, y = _rows(configs, curves, _keep(curves, max_points), log_top)
        if len(y) < 2:
            return None
        fit_x, fit_y = (
            (x, y)
            if len(y) <= max_fit_points
            else _rows(configs, curves, _keep(curves, max_fit_points), log_top)
        )
        pending_x = np.array(pending).reshape(-1, codec.width)
        return Points(x, y, fit_x, fit_y, pending_x, first, first + top - 1)

    def _step_range(self, study_name: str, t: FrozenTrial) -> tuple[int, int] | None:
        """The first and last step ``t`` reported (None without a report)."""
        cached = (study_name, t.number)
        if cached in self._steps:
            return self._steps[cached]
        steps = t.intermediate_values
        found = (min(steps), max(steps)) if steps else None
        if t.state.is_finished():
            self._steps[cached] = found
        return found


def _curve(
    t: FrozenTrial, codec: _Codec, sign: float, first: int, top: int
) -> tuple[np.ndarray, _Curve] | None:
    """``t``'s config and kept points; an empty curve for a trial that reported nothing yet
    (a pending config when it runs); None when it lacks a parameter of the space."""
    config = codec.encode(t.params)
    if config is None:
        return None
    epochs = {s - first + 1: v for s, v in t.intermediate_values.items() if math.isfinite(v)}
    if t.state == TrialState.COMPLETE and t.value is not None and math.isfinite(t.value):
        epochs[max([top, *epochs])] = t.value
    if not epochs:
        return (config, ()) if t.state == TrialState.RUNNING else None
    keep = {e for e in epochs if _is_rung(e)} | {max(epochs)}
    return config, tuple((e, sign * epochs[e]) for e in sorted(keep))


def _keep(curves: Sequence[_Curve], budget: int) -> list[int]:
    """How many points (the last ones) of each curve the model keeps, at most ``budget`` in all:
    every point when they fit, else the best curves, the latest, then the others spread."""
    counts = [len(c) for c in curves]
    if sum(counts) <= budget:
        return counts
    keep = [0] * len(curves)
    used = 0

    def take(order: Sequence[int], until: int) -> None:
        nonlocal used
        for i in order:
            if used >= until:
                return
            if keep[i] == 0:
                keep[i] = min(counts[i], until - used)
                used += keep[i]

    # Highest last value first, ties by study order (a stable sort of the negated values).
    last = np.array([c[-1][1] for c in curves])
    take(np.argsort(-last, kind="stable").tolist(), budget // 4)
    take(range(len(curves) - 1, -1, -1), budget // 2)
    rest = np.flatnonzero(np.array(keep) == 0)
    take(rest[list(_spread(len(rest)))].tolist(), budget)
    return keep


@functools.cache
def _spread(n: int) -> tuple[int, ...]:
    """0..n-1 in van der Corput order (bit-reversed fractions of the range): any prefix of it is
    spread evenly over the range."""
    if n == 0:
        return ()
    bits = max(1, (n - 1).bit_length())
    k = np.arange(1 << bits)
    reversed_ = np.zeros_like(k)
    for b in range(bits):
        reversed_ |= ((k >> b) & 1) << (bits - 1 - b)
    positions = (reversed_ * n) >> bits  # floor(fraction * n): every position at least once
    _, first = np.unique(positions, return_index=True)
    return tuple(int(positions[i]) for i in np.sort(first))


def _rows(
    configs: Sequence[np.ndarray], curves: Sequence[_Curve], keep: Sequence[int], log_top: float
) -> tuple[np.ndarray, np.ndarray]:
    """The kept points as model inputs and values, in study order."""
    which: list[int] = []
    epochs: list[float] = []
    ys: list[float] = []
    for i, (curve, k) in enumerate(zip(curves, keep, strict=True)):
        for epoch, value in curve[len(curve) - k :] if k else ():
            which.append(i)
            epochs.append(math.log(epoch) / log_top if log_top else 1.0)
            ys.append(value)
    width = len(configs[0]) + 1 if configs else 1
    if not which:
        return np.empty((0, width)), np.array(ys)
    # Only the kept trials' configs: a large study holds thousands more.
    x = np.column_stack([np.array([configs[i] for i in which], dtype=float), epochs])
    return x, np.array(ys)


def _is_rung(epoch: int) -> bool:
    """Whether ``epoch`` (>= 1) is a power of 3."""
    while epoch % 3 == 0:
        epoch //= 3
    return epoch == 1
