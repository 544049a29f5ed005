"""``trials.pause``: which paused trial the search continues, and which paused state goes first
when the disk budget is spent. Pure (stdlib only): the loop, the ``status`` view and the search
suite's replay (``benchmarks/search``) hand it the same curves and get the same answer.

The rule is asynchronous successive halving's promotion (Li et al., "A System for Massively
Parallel Hyperparameter Tuning", MLSys 2020, Algorithm 2), taken over unchanged because it needs
nothing from the pruner but its reduction factor and works whichever pruner paused the trial:

- a trial paused after step ``s`` is *promotable* while it ranks in the top ``1 / eta`` of every
  chain that reported step ``s`` (``floor(n / eta)`` of them, ``n`` counting itself); as more
  trials reach ``s`` a paused one can become promotable (the pruner stopped it when the top
  ``1 / eta`` of the few there so far left it out: ASHA's "repechage");
- when a slot frees, the promotable trial at the highest step goes first (the one closest to a
  finished curve), then the best ranked; with none promotable the sampler draws a new config.

Why not the sampler's expected improvement at the next step: the default sampler for short
curves has no pruner at all, and the samplers that do run with a pruner (TPE) have no curve
model; the rank needs nothing but the stored curves, so one rule holds for every sampler.

The least promising paused trial (the worst ranked at its step, then the one paused earliest in
its curve, which cost the least) is evicted first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_ETA",
    "ChainCurve",
    "Standing",
    "choose",
    "eta_of",
    "eviction_order",
    "standings",
]

DEFAULT_ETA = 3.0  # ASHA's own default; for pruners without a reduction factor
# A rung pruner's own default where it is not 3: Optuna's successive halving keeps a quarter.
_OWN_ETA = {"successive_halving": 4.0}


@dataclass(frozen=True)
class ChainCurve:
    """One trial's curve across its attempts (a paused trial and its continuations are one
    chain, named by its first attempt's number)."""

    chain: int
    values: Mapping[int, float] = field(default_factory=dict)  # the objective at each step
    paused_at: int | None = None  # the step it is paused after; None: running or ended


@dataclass(frozen=True)
class Standing:
    """Where a paused chain stands at the step it was paused after."""

    chain: int
    step: int
    rank: int  # 0: the best of those that reported ``step``
    peers: int  # how many chains reported ``step``, itself included
    promotable: bool

    @property
    def quantile(self) -> float:
        return self.rank / self.peers


def eta_of(pruner_kind: str, args: Mapping[str, object]) -> float:
    """The reduction factor the promotion rule keeps the top ``1 / eta`` with: the pruner's own
    where it has one, 2 for the median pruner (it keeps the better half), ``100 / (100 - p)``
    for the percentile pruner (it keeps what is above the ``p``-th percentile), else the
    pruner's own default (4 for Optuna's successive halving) or :data:`DEFAULT_ETA`."""
    factor = args.get("reduction_factor")
    if isinstance(factor, int | float) and factor > 1:
        return float(factor)
    if pruner_kind == "median":
        return 2.0
    percentile = args.get("percentile")
    if pruner_kind == "percentile" and isinstance(percentile, int | float) and 0 < percentile < 100:
        return 100.0 / (100.0 - float(percentile))
    return _OWN_ETA.get(pruner_kind, DEFAULT_ETA)


def standings(curves: Iterable[ChainCurve], *, maximize: bool, eta: float) -> list[Standing]:
    """Every paused chain's standing at its step (chains without a finite value there are
    left out: nothing can rank them)."""
    curves = list(curves)
    out: list[Standing] = []
    for curve in curves:
        step = curve.paused_at
        if step is None:
            continue
        own = curve.values.get(step)
        if own is None or not math.isfinite(own):
            continue
        key = _key(own, curve.chain, maximize)
        peers = [
            _key(v, c.chain, maximize)
            for c in curves
            if (v := c.values.get(step)) is not None and math.isfinite(v)
        ]
        rank = sum(1 for other in peers if other < key)
        keep = math.floor(len(peers) / eta)
        out.append(Standing(curve.chain, step, rank, len(peers), promotable=rank < keep))
    return out


def choose(curves: Iterable[ChainCurve], *, maximize: bool, eta: float) -> int | None:
    """The paused chain to continue now (its first attempt's number), or None: start a new
    config."""
    ready = [s for s in standings(curves, maximize=maximize, eta=eta) if s.promotable]
    if not ready:
        return None
    best = min(ready, key=lambda s: (-s.step, s.quantile, s.chain))
    return best.chain


def eviction_order(curves: Iterable[ChainCurve], *, maximize: bool, eta: float) -> list[int]:
    """The paused chains, least promising first (the order their states are evicted in)."""
    curves = list(curves)
    ranked = standings(curves, maximize=maximize, eta=eta)
    unranked = [
        c.chain
        for c in curves
        if c.paused_at is not None and c.chain not in {s.chain for s in ranked}
    ]
    order = sorted(ranked, key=lambda s: (-s.quantile, s.step, -s.chain))
    return sorted(unranked, reverse=True) + [s.chain for s in order]


def _key(value: float, chain: int, maximize: bool) -> tuple[float, int]:
    # Smaller is better; ties go to the earlier chain, as Optuna's best trial does.
    return (-value if maximize else value, chain)
