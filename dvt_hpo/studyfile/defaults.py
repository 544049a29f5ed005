"""The settings Optuna would guess at run time that the study file already tells (a pruner's
resources from the trainer's epochs). The default sampler and pruner of a study file that names
neither are the registry's: :data:`dvt_hpo.sampling.kinds.DEFAULTS`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from dvt_hpo.spec.model import Dimension, PrunerSpec, StudySection

__all__ = ["derive_budget_settings", "file_epochs"]


def file_epochs(root: Mapping[str, Any]) -> int | None:
    """``trainer.config.epochs`` of a study file's tree, when it is a positive int (the epochs
    a trial reports, which pick the default by the curve's length); None otherwise."""
    trainer = root.get("trainer")
    config = trainer.get("config") if isinstance(trainer, Mapping) else None
    epochs = config.get("epochs") if isinstance(config, Mapping) else None
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        return None
    return epochs


def derive_budget_settings(
    study: StudySection, trainer_config: Mapping[str, Any], dims: Sequence[Dimension]
) -> StudySection:
    """Settings Optuna would guess from the first finished trial, taken from the study file
    instead: Hyperband's ``max_resource`` is the trainer's epochs (``trainer.config.epochs``,
    or the largest value of an ``epochs`` dimension), so its brackets are right from the first
    trial on. Left to Optuna (``auto``) when the file does not say how many epochs a trial runs.
    ``mo_asha``'s first rung (``min_resource``) is a tenth of those epochs, its last below them;
    ``wilcoxon_halving`` and ``wilcoxon`` decide below them too (``max_resource``)."""
    pruner = study.pruner
    if pruner.kind == "mo_asha":
        return _mo_asha_rungs(study, trainer_config, dims)
    if pruner.kind in ("wilcoxon_halving", "wilcoxon"):
        return _rungs_below_last_epoch(study, _epochs(trainer_config, dims))
    if pruner.kind != "hyperband" or "max_resource" in pruner.kwargs:
        return study
    epochs = _epochs(trainer_config, dims)
    if epochs is None:
        return study
    min_resource = pruner.kwargs.get("min_resource", 1)
    if isinstance(min_resource, int) and epochs <= min_resource:
        return study  # Optuna refuses max_resource <= min_resource; leave it to say so
    kwargs = {**pruner.kwargs, "max_resource": epochs}
    return dataclasses.replace(study, pruner=PrunerSpec(pruner.kind, kwargs))


def _epochs(trainer_config: Mapping[str, Any], dims: Sequence[Dimension]) -> int | None:
    """The epochs a trial runs: ``trainer.config.epochs`` or the top of an ``epochs``
    dimension (None when the file does not say)."""
    epochs = trainer_config.get("epochs")
    for dim in dims:
        if dim.path == "epochs" and dim.kind == "int" and dim.high is not None:
            epochs = dim.high
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        return None
    return epochs


def _mo_asha_rungs(
    study: StudySection, trainer_config: Mapping[str, Any], dims: Sequence[Dimension]
) -> StudySection:
    """``mo_asha``'s rungs, where the file does not set them: the first (``min_resource``) at a
    tenth of the epochs (at least 1; 1 when the file does not say), none at or past
    ``max_resource`` = epochs - 1 (a trial reporting steps 0..E-1 is never stopped at its last,
    one reporting 1..E not at its last two). On LCBench (52 epochs) a first rung at epoch 5 was
    ahead of no pruning under every sampler on two sets of tasks, one at epoch 1 (MO-ASHA's own
    default) behind it under TPE on both (docs/multi-objective-pruning.md): learning curves
    still cross in their first epochs."""
    epochs = _epochs(trainer_config, dims)
    kwargs = dict(study.pruner.kwargs)
    kwargs.setdefault("min_resource", max(1, epochs // 10) if epochs is not None else 1)
    study = dataclasses.replace(study, pruner=PrunerSpec(study.pruner.kind, kwargs))
    return _rungs_below_last_epoch(study, epochs)


def _rungs_below_last_epoch(study: StudySection, epochs: int | None) -> StudySection:
    """The pruner's ``max_resource``, where the file does not set it: epochs - 1, so that no
    rung or test decides at a trial's last report (steps 0..E-1 or 1..E), when it has trained
    every epoch (``mo_asha``, ``wilcoxon_halving``, ``wilcoxon``). Left unset (no limit) when the file does not say
    how many epochs a trial runs."""
    if epochs is None or "max_resource" in study.pruner.kwargs:
        return study
    kwargs = {**study.pruner.kwargs, "max_resource": max(1, epochs - 1)}
    return dataclasses.replace(study, pruner=PrunerSpec(study.pruner.kind, kwargs))
