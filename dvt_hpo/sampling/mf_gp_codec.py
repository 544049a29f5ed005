"""The multi-fidelity GP's inputs: a config as a row of the unit cube, and back.

A range is scaled to [0, 1] (a log range in log space), a categorical is one-hot. A conditional
parameter the model takes (:mod:`dvt_hpo.sampling.mf_gp_conditions`) has its columns at
:data:`~dvt_hpo.sampling.mf_gp_conditions.ABSENT` in a config its parent's choice leaves it out
of, and a decoded config leaves it out the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from dvt_hpo.sampling.mf_gp_conditions import ABSENT, Rule

__all__ = ["Codec"]


class Codec:
    """Params of ``space`` to the unit cube and back; ``rules``: its conditional parameters."""

    def __init__(
        self, space: dict[str, BaseDistribution], rules: Mapping[str, Rule] | None = None
    ) -> None:
        self.names = sorted(space)
        self.space = space
        self.rules = dict(rules or {})
        self.slices: dict[str, slice] = {}
        width = 0
        for name in self.names:
            d = space[name]
            n = len(d.choices) if isinstance(d, CategoricalDistribution) else 1
            self.slices[name] = slice(width, width + n)
            width += n
        self.width = width
        # What a row of this codec means: the points read for another key are read again.
        self.key = tuple((n, repr(space[n]), self.rules.get(n)) for n in self.names)

    def encode(self, params: Mapping[str, Any]) -> np.ndarray | None:
        """The row of ``params``; None when they lack a parameter their choices call for (a
        trial still running, or one that lacks a parameter every other trial has)."""
        out = np.zeros(self.width)
        for name in self.names:
            d, where = self.space[name], self.slices[name]
            if name not in params:
                rule = self.rules.get(name)
                if rule is None or rule.parent not in params:
                    return None
                parent = self.space[rule.parent]
                if rule.holds(int(parent.to_internal_repr(params[rule.parent]))):
                    return None
                out[where] = ABSENT
            elif isinstance(d, CategoricalDistribution):
                out[where.start + d.to_internal_repr(params[name])] = 1.0
            else:
                low, high, v = _bounds(d, float(params[name]))
                out[where.start] = 0.5 if high == low else (v - low) / (high - low)
        return out

    def decode(self, row: np.ndarray) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.names:
            if not self._applies(name, row):
                continue
            d, where = self.space[name], self.slices[name]
            if isinstance(d, CategoricalDistribution):
                out[name] = d.choices[int(np.argmax(row[where]))]
                continue
            low, high, _ = _bounds(d, float(d.low))
            v = low + float(row[where.start]) * (high - low)
            value = math.exp(v) if d.log else v
            if isinstance(d, IntDistribution):
                value = d.low + round((value - d.low) / d.step) * d.step
                out[name] = int(min(max(value, d.low), d.high))
            else:
                assert isinstance(d, FloatDistribution)
                if d.step is not None:
                    value = d.low + round((value - d.low) / d.step) * d.step
                out[name] = float(min(max(value, d.low), d.high))
        return out

    def _applies(self, name: str, row: np.ndarray) -> bool:
        rule = self.rules.get(name)
        if rule is None:
            return True
        return rule.holds(int(np.argmax(row[self.slices[rule.parent]])))

    def snap(self, rows: np.ndarray) -> np.ndarray:
        """Rows as the configs they decode to (rounded to a step or an integer, one category,
        a parameter its parent's choice leaves out at ABSENT)."""
        out = np.clip(rows, 0.0, 1.0)
        for name in self.names:
            d, where = self.space[name], self.slices[name]
            if isinstance(d, CategoricalDistribution):
                hot = np.argmax(out[:, where], axis=1)
                out[:, where] = np.eye(where.stop - where.start)[hot]
                continue
            step = d.step  # type: ignore[union-attr]
            if step is None:
                continue
            low, high, _ = _bounds(d, float(d.low))
            if high == low:
                continue
            v = low + out[:, where.start] * (high - low)
            value = np.exp(v) if d.log else v  # type: ignore[union-attr]
            value = d.low + np.round((value - d.low) / step) * step  # type: ignore[union-attr]
            value = np.clip(value, d.low, d.high)  # type: ignore[union-attr]
            v = np.log(value) if d.log else value  # type: ignore[union-attr]
            out[:, where.start] = (v - low) / (high - low)
        for name, rule in self.rules.items():  # parents are categorical: snapped above
            chosen = np.argmax(out[:, self.slices[rule.parent]], axis=1)
            left_out = ~np.isin(chosen, list(rule.active))
            out[left_out, self.slices[name]] = ABSENT
        return out

    def random(self, rng: np.random.Generator, n: int) -> np.ndarray:
        out = rng.random((n, self.width))
        for name in self.names:
            where = self.slices[name]
            if isinstance(self.space[name], CategoricalDistribution):
                hot = rng.integers(0, where.stop - where.start, n)
                out[:, where] = np.eye(where.stop - where.start)[hot]
        return out


def _bounds(d: BaseDistribution, value: float) -> tuple[float, float, float]:
    assert isinstance(d, (FloatDistribution, IntDistribution))
    if d.log:
        return math.log(d.low), math.log(d.high), math.log(value)
    return float(d.low), float(d.high), value
