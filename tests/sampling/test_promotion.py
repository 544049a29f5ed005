"""The promotion rule of ``trials.pause`` (ASHA's): who continues, who is evicted first."""

from __future__ import annotations

import pytest

from dvt_hpo.sampling.promotion import (
    DEFAULT_ETA,
    ChainCurve,
    choose,
    eta_of,
    eviction_order,
    standings,
)


def curve(chain: int, values: dict[int, float], paused_at: int | None = None) -> ChainCurve:
    return ChainCurve(chain, values, paused_at)


def test_a_paused_trial_becomes_promotable_as_worse_trials_reach_its_step() -> None:
    # Paused at step 1 behind trial 0: with 2 at that step floor(2 / 2) = 1 keeps trial 0 only.
    curves = [curve(0, {1: 0.9, 2: 0.95}), curve(1, {1: 0.8}, paused_at=1)]
    assert choose(curves, maximize=True, eta=2) is None
    # Two worse trials reach step 1: floor(4 / 2) = 2 keeps trial 1 too (ASHA's repechage).
    curves += [curve(2, {1: 0.5}, paused_at=1), curve(3, {1: 0.4}, paused_at=1)]
    assert choose(curves, maximize=True, eta=2) == 1
    (one,) = [s for s in standings(curves, maximize=True, eta=2) if s.chain == 1]
    assert (one.rank, one.peers, one.promotable) == (1, 4, True)


def test_the_direction_decides_who_ranks_first() -> None:
    curves = [
        curve(0, {0: 1.0}, paused_at=0),
        curve(1, {0: 2.0}, paused_at=0),
        curve(2, {0: 3.0}, paused_at=0),
    ]
    assert choose(curves, maximize=False, eta=3) == 0
    assert choose(curves, maximize=True, eta=3) == 2


def test_the_highest_step_goes_first_then_the_best_ranked() -> None:
    low = [curve(n, {0: 0.05}) for n in range(10, 16)]
    curves = [
        *low,
        curve(1, {0: 0.9}, paused_at=0),  # promotable at step 0
        curve(2, {0: 0.95, 3: 0.5}, paused_at=3),  # alone at step 3: floor(1 / 3) = 0
    ]
    assert choose(curves, maximize=True, eta=3) == 1
    curves += [curve(20 + n, {3: 0.1}) for n in range(3)]  # 4 at step 3: keeps 1, trial 2
    assert choose(curves, maximize=True, eta=3) == 2


def test_ties_go_to_the_earlier_trial_and_nan_is_never_ranked() -> None:
    curves = [curve(n, {0: 0.5}, paused_at=0) for n in range(3)]
    assert choose(curves, maximize=True, eta=3) == 0
    nan = [curve(0, {0: float("nan")}, paused_at=0), curve(1, {0: 0.1}), curve(2, {0: 0.0})]
    assert standings(nan, maximize=True, eta=1.5) == []


def test_eviction_goes_least_promising_first() -> None:
    curves = [
        curve(0, {0: 0.9, 1: 0.9}),
        curve(1, {0: 0.8}, paused_at=0),
        curve(2, {0: 0.1}, paused_at=0),
        curve(3, {0: 0.7, 1: 0.2}, paused_at=1),
        curve(4, {}, paused_at=None),
    ]
    # Worst quantile first: 2 (3 of 4 at step 0), 3 (1 of 2 at step 1), 1 (1 of 4 at step 0).
    assert eviction_order(curves, maximize=True, eta=3) == [2, 3, 1]


@pytest.mark.parametrize(
    ("kind", "args", "eta"),
    [
        ("successive_halving", {"reduction_factor": 2}, 2.0),
        ("successive_halving", {}, 4.0),  # Optuna's own default
        ("wilcoxon_halving", {}, 3.0),
        ("wilcoxon_halving", {"reduction_factor": 2}, 2.0),
        ("hyperband", {}, DEFAULT_ETA),
        ("median", {}, 2.0),
        ("percentile", {"percentile": 75.0}, 4.0),
        ("threshold", {"lower": 0.5}, DEFAULT_ETA),
    ],
)
def test_eta_follows_the_pruner(kind: str, args: dict[str, object], eta: float) -> None:
    assert eta_of(kind, args) == pytest.approx(eta)
