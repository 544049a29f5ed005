"""Optuna's Wilcoxon pruner, deciding in a millisecond where scipy takes seconds.

``WilcoxonPruner`` (the default pruner for long curves, :data:`dvt_hpo.sampling.kinds.DEFAULTS`)
compares a trial's epochs with the best trial's through
``scipy.stats.wilcoxon(..., zero_method="zsplit")``. When the differences hold a zero or a tie
(common: accuracies on a validation set are multiples of 1/N) and there are at most 13 of them,
scipy runs an exact permutation test whose statistic is evaluated once per sign pattern
in Python: 2**n calls, 0.1 s at 9 epochs and 2.7 s at 13 on one core. dvt-hpo decides under
the study's lock, so every trial's report and the next ``ask`` wait behind it.

:func:`signed_rank_pvalue` computes that same exact test on all 2**n sign patterns at once with
numpy, and gives the same float as scipy (the same count of patterns divided by 2**n, compared
with scipy's tolerance); every other case is scipy's own call. :class:`WilcoxonPruner` is
Optuna's pruner with only that call swapped: its ``prune`` follows Optuna's step for step, and
``tests/sampling/test_wilcoxon.py`` checks both against scipy and Optuna decision for decision.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Literal

import numpy as np
import optuna
from optuna.study import StudyDirection

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

__all__ = ["EXACT_MAX_N", "WilcoxonPruner", "check_max_resource", "signed_rank_pvalue"]

# scipy's method="auto" runs the exact permutation test up to this many differences when some
# are tied or zero (2**13 patterns is under its default 9999 resamples), the asymptotic one above.
EXACT_MAX_N = 13
# scipy.stats.permutation_test's relative tolerance for "as extreme as observed".
_EPS = float(np.finfo(np.float64).eps) * 100


def signed_rank_pvalue(diffs: np.ndarray, alternative: Literal["less", "greater"]) -> float:
    """``scipy.stats.wilcoxon(diffs, alternative=alternative, zero_method="zsplit").pvalue``."""
    import scipy.stats as ss

    d = np.asarray(diffs, dtype=np.float64)
    n = d.size
    magnitudes = np.abs(d)
    tied_or_zero = bool(np.any(d == 0)) or np.unique(magnitudes).size < n
    if not (0 < n <= EXACT_MAX_N and tied_or_zero):
        return float(ss.wilcoxon(d, alternative=alternative, zero_method="zsplit").pvalue)
    ranks = ss.rankdata(magnitudes)
    # zsplit adds half of each zero's rank to the positive sum under every sign pattern alike,
    # so zeros shift the observed statistic and its null distribution by the same amount and
    # are left out of both.
    observed = float(np.sum(ranks[d > 0]))
    # Row k flips the signs of the differences whose bit is set in k (row 0 is the observation).
    flips = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
    positive = (flips == 0) & (d > 0) | (flips == 1) & (d < 0)
    null = positive @ ranks
    gamma = abs(_EPS * observed)
    if alternative == "less":
        count = int(np.count_nonzero(null <= observed + gamma))
    else:
        count = int(np.count_nonzero(null >= observed - gamma))
    return count / 2**n


def check_max_resource(max_resource: int | None) -> None:
    """A pruner's ``max_resource`` (the first step it no longer decides at): an integer >= 1,
    or None for no limit."""
    if max_resource is not None and (
        isinstance(max_resource, bool) or not isinstance(max_resource, int) or max_resource < 1
    ):
        raise ValueError(f"max_resource must be an integer >= 1 or None, got {max_resource!r}")


class WilcoxonPruner(optuna.pruners.WilcoxonPruner):
    """``optuna.pruners.WilcoxonPruner`` with :func:`signed_rank_pvalue` for scipy's test.

    ``max_resource`` (None: Optuna's behaviour) is the first step at which the test no longer
    decides: a trial at its last report has trained every epoch, and stopping it there saves
    nothing but records a fully trained trial PRUNED, out of ``best`` and of the sampler's
    complete trials (the loader sets it to the trainer's epochs - 1)."""

    def __init__(
        self,
        *,
        p_threshold: float = 0.1,
        n_startup_steps: int = 2,
        max_resource: int | None = None,
    ) -> None:
        check_max_resource(max_resource)
        super().__init__(p_threshold=p_threshold, n_startup_steps=n_startup_steps)
        self._max_resource = max_resource

    def prune(self, study: optuna.study.Study, trial: FrozenTrial) -> bool:
        if len(trial.intermediate_values) == 0:
            return False
        last = trial.last_step
        if self._max_resource is not None and last is not None and last >= self._max_resource:
            return False
        current = _finite_curve(trial, "the current trial")
        if current is None:
            return False
        steps, step_values = current
        try:
            best_trial = study.best_trial
        except ValueError:
            return False
        if len(best_trial.intermediate_values) == 0:
            warnings.warn(
                "The best trial has no intermediate values so WilcoxonPruner cannot prune trials.",
                stacklevel=2,
            )
            return False
        best = _finite_curve(best_trial, "the best trial")
        if best is None:
            return False
        best_steps, best_step_values = best
        _, idx1, idx2 = np.intersect1d(steps, best_steps, return_indices=True)
        if len(idx1) < len(step_values):
            warnings.warn(
                "WilcoxonPruner finds steps existing in the current trial but does not exist in "
                "the best trial. Those values are ignored.",
                stacklevel=2,
            )
        diff_values = step_values[idx1] - best_step_values[idx2]
        if len(diff_values) < max(2, self._n_startup_steps):
            return False
        alt: Literal["less", "greater"]
        if study.direction == StudyDirection.MAXIMIZE:
            alt = "less"
            average_is_best = sum(best_step_values) / len(best_step_values) <= sum(
                step_values
            ) / len(step_values)
        else:
            alt = "greater"
            average_is_best = sum(best_step_values) / len(best_step_values) >= sum(
                step_values
            ) / len(step_values)
        p = signed_rank_pvalue(diff_values, alt)
        # Optuna's safety: a trial whose average beats the best's is kept whatever the test says.
        return bool(p < self._p_threshold and not average_is_best)


def _finite_curve(trial: FrozenTrial, whose: str) -> tuple[np.ndarray, np.ndarray] | None:
    """A trial's (steps, values), or None with Optuna's warning when a value is inf or NaN."""
    steps, values = np.array(list(trial.intermediate_values.items())).T
    if np.any(~np.isfinite(values)):
        warnings.warn(
            f"The intermediate values of {whose} (trial {trial.number}) contain infinity/NaNs. "
            "WilcoxonPruner will not prune the current trial.",
            stacklevel=3,
        )
        return None
    return steps, values
