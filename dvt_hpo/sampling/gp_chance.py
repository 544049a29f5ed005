"""Stop a trial once the multi-fidelity GP gives it little chance of ending best.

Learning-curve extrapolation (Domhan et al. 2015) stops a training when the chance that its
final value beats the best one so far falls under a threshold. With the multi-fidelity GP
(:mod:`dvt_hpo.sampling.mf_gp`) that chance is already there: the model, fitted on every trial's
curve, conditions on this trial's reports and predicts its value at the last epoch. So this
pruner asks the study's sampler, and keeps every trial while the sampler is not the GP or its
model does not decide yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import optuna

from dvt_hpo.sampling.mf_gp import MultiFidelityGPSampler
from dvt_hpo.sampling.wilcoxon import check_max_resource

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

__all__ = ["GPChancePruner"]


class GPChancePruner(optuna.pruners.BasePruner):
    """Stops a trial whose chance of ending above the best finished config (the GP's) is under
    ``min_chance``, from ``min_trials`` finished trials on, and from a trial's ``min_reports``-th
    report on (counted, not read off the step, which trainers number from 0 or from 1).
    ``max_resource``: the first step at which it no longer decides (the loader sets it to the
    trainer's epochs - 1, as for the Wilcoxon test).

    Its defaults were chosen on the search suite's selection half (round 12: 1, 5 and 10 %,
    from the 3rd, 5th, 6th and 10th finished trial). From the 6th it also stops the GP's random
    start (10 trials) where a trial is hopeless, which is where a short study's budget went;
    from the 3rd it stopped built-in trainer curves that cross later; 5 % ended behind 1 % at
    100 % of the budget on the learner choice. It is not the default pruner: on the report half
    it ended behind TPE on the built-in trainer's 1,000-config table (dvt_hpo.sampling.kinds).
    """

    def __init__(
        self,
        *,
        min_chance: float = 0.01,
        min_trials: int = 6,
        min_reports: int = 1,
        max_resource: int | None = None,
    ) -> None:
        if (
            isinstance(min_chance, bool)
            or not isinstance(min_chance, int | float)
            or not (0.0 < min_chance < 1.0)
        ):
            raise ValueError(f"min_chance must be a number between 0 and 1, got {min_chance!r}")
        check_max_resource(max_resource)
        if isinstance(min_trials, bool) or not isinstance(min_trials, int) or min_trials < 2:
            raise ValueError(f"min_trials must be an integer >= 2, got {min_trials!r}")
        if isinstance(min_reports, bool) or not isinstance(min_reports, int) or min_reports < 1:
            raise ValueError(f"min_reports must be an integer >= 1, got {min_reports!r}")
        self._min_chance = float(min_chance)
        self._min_trials = min_trials
        self._min_reports = min_reports
        self._max_resource = max_resource

    def prune(self, study: optuna.study.Study, trial: FrozenTrial) -> bool:
        last = trial.last_step
        if last is None or len(trial.intermediate_values) < self._min_reports:
            return False
        if self._max_resource is not None and last >= self._max_resource:
            return False
        if not isinstance(study.sampler, MultiFidelityGPSampler):
            return False
        chance = study.sampler.chance_to_lead(study, trial, min_finished=self._min_trials)
        return chance is not None and chance < self._min_chance
