"""TPE fitted on the values at a rung, so that pruned trials' curves count as BOHB counts them.

Optuna's TPE ranks every complete trial above every pruned one, whatever the pruned trial's
curve said: under a pruner that stops most trials, its "good" set is the few trials that ran to
the end, and what the pruned ones showed at the epochs they did train is mostly lost. BOHB (Falkner
et al. 2018) fits its model on the highest budget (rung) that enough trials reached instead,
stopped trials included. :class:`RungTPESampler` does that with Optuna's own TPE: the rung is the
highest epoch that ``min_trials`` finished trials reached, and the TPE it wraps is shown a copy
of the study (kept in memory, one per rung) where each trial that reached the rung is complete
with its value at that epoch, and each that stopped earlier is pruned with its curve (ranked
below the others, as Optuna's TPE ranks pruned trials). The real study is only read.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

__all__ = ["RungTPESampler", "rung_of"]

_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def rung_of(last_steps: Sequence[int], min_trials: int) -> int | None:
    """The highest step that at least ``min_trials`` of the trials (given by their last
    reported step) reached; the lowest of them when fewer trials have finished (None: none)."""
    if not last_steps:
        return None
    ordered = sorted(last_steps, reverse=True)
    return ordered[min(min_trials, len(ordered)) - 1]


class RungTPESampler(optuna.samplers.BaseSampler):
    """Optuna's ``TPESampler`` told each finished trial's value at the study's rung.

    ``min_trials``: how many finished trials must have reached an epoch for it to be the rung
    (higher: a later, more telling epoch, fitted on fewer trials). The other arguments are
    TPESampler's. Several trials at a time: the trials still running are not shown to TPE (no
    constant liar)."""

    def __init__(
        self,
        *,
        min_trials: int = 10,
        multivariate: bool = False,
        n_startup_trials: int = 10,
        n_ei_candidates: int = 24,
        seed: int | None = None,
    ) -> None:
        if not isinstance(min_trials, int) or isinstance(min_trials, bool) or min_trials < 1:
            raise ValueError(f"min_trials must be an integer >= 1, got {min_trials!r}")
        self._min_trials = min_trials
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self._tpe = optuna.samplers.TPESampler(
                multivariate=multivariate,
                n_startup_trials=n_startup_trials,
                n_ei_candidates=n_ei_candidates,
                seed=seed,
                # The copy holds no running trial, and the trial asked is not in its storage
                # (Optuna 5's TPE has the constant liar on by default).
                constant_liar=False,
            )
        # rung -> (the in-memory copy fitted at that rung, numbers of the trials it holds)
        self._copies: dict[int, tuple[Study, set[int]]] = {}
        self._current: tuple[int, Study] | None = None  # (finished trials seen, its copy)

    def reseed_rng(self) -> None:
        self._tpe.reseed_rng()

    def rung(self, study: Study) -> int | None:
        """The rung the next trial's params are fitted on (None before any trial finished)."""
        return rung_of([_last_step(t) for t in _finished(study)], self._min_trials)

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return self._tpe.infer_relative_search_space(self._copy(study), trial)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self._tpe.sample_relative(self._copy(study), trial, search_space)

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self._tpe.sample_independent(
            self._copy(study), trial, param_name, param_distribution
        )

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self._tpe.before_trial(study, trial)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._tpe.after_trial(study, trial, state, values)

    def _copy(self, study: Study) -> Study:
        """The in-memory study TPE is fitted on: every finished trial, valued at the rung."""
        finished = [t for t in _finished(study) if t.intermediate_values or t.values]
        if self._current is not None and self._current[0] == len(finished):
            return self._current[1]
        rung = rung_of([_last_step(t) for t in finished], self._min_trials)
        if rung is None or len(study.directions) != 1:
            return study  # nothing finished yet (TPE samples at random) or several objectives
        if rung not in self._copies:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                copy = optuna.create_study(direction=study.direction)
            self._copies[rung] = (copy, set())
        copy, held = self._copies[rung]
        for t in finished:
            if t.number not in held:
                copy.add_trial(_at_rung(t, rung))
                held.add(t.number)
        self._current = (len(finished), copy)
        return copy


def _finished(study: Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=_FINISHED)


def _last_step(trial: FrozenTrial) -> int:
    """The last epoch a trial reported (a complete trial that reported none: a full one)."""
    if trial.intermediate_values:
        return max(trial.intermediate_values)
    return 2**31


def _at_rung(trial: FrozenTrial, rung: int) -> FrozenTrial:
    """``trial`` as TPE sees it at ``rung``: complete with its value there (its last report at
    or before it), or pruned with its curve when it stopped before."""
    steps = trial.intermediate_values
    if _last_step(trial) >= rung:
        upto = [s for s in steps if s <= rung]
        value = steps[max(upto)] if upto else trial.value
        if value is not None and math.isfinite(value):
            state, values = TrialState.COMPLETE, value
        else:
            state, values = TrialState.PRUNED, None  # a NaN or inf there ranks it last
    else:
        state, values = TrialState.PRUNED, None
    return optuna.trial.create_trial(
        state=state,
        value=values,
        params=trial.params,
        distributions=trial.distributions,
        intermediate_values=dict(steps),
    )
