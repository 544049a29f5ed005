"""The settings Optuna would guess at run time that the study file already tells (a pruner's
resources from the trainer's epochs): which arguments, and by which rule, the pruner's registry
row says (:attr:`dvt_hpo.sampling.kinds.Kind.derived`); the rules are here. The default sampler
and pruner of a study file that names neither are the registry's too:
:data:`dvt_hpo.sampling.kinds.DEFAULTS`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dvt_hpo.sampling.kinds import PRUNERS, Derivation
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
    instead: the arguments the pruner's row derives (:attr:`dvt_hpo.sampling.kinds.Kind.derived`)
    from the epochs a trial runs (``trainer.config.epochs``, or the largest value of an
    ``epochs`` dimension), where the file leaves them out. Hyperband's ``max_resource`` is those
    epochs, so its brackets are right from the first trial on (left to Optuna, ``auto``, when
    the file does not say how many epochs a trial runs); ``mo_asha``'s first rung
    (``min_resource``) is a tenth of them, its last below them; ``wilcoxon_halving`` and
    ``wilcoxon`` decide below them too (``max_resource``)."""
    pruner = study.pruner
    row = PRUNERS.get(pruner.kind)
    if row is None or not row.derived:
        return study
    epochs = _epochs(trainer_config, dims)
    kwargs = dict(pruner.kwargs)
    for argument, how in row.derived:
        if argument not in kwargs and (value := _DERIVE[how](epochs, kwargs)) is not None:
            kwargs[argument] = value
    if kwargs == pruner.kwargs:
        return study
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


def _all_epochs(epochs: int | None, kwargs: Mapping[str, Any]) -> int | None:
    """Hyperband's ``max_resource``: the epochs (None, left to Optuna, when the file does not
    say, or when they are at or below ``min_resource``: Optuna refuses that; left for it to
    say so)."""
    min_resource = kwargs.get("min_resource", 1)
    if epochs is None or (isinstance(min_resource, int) and epochs <= min_resource):
        return None
    return epochs


def _below_last_epoch(epochs: int | None, kwargs: Mapping[str, Any]) -> int | None:
    """A ``max_resource`` of epochs - 1, so that no rung or test decides at a trial's last
    report (steps 0..E-1 or 1..E), when it has trained every epoch (``mo_asha``,
    ``wilcoxon_halving``, ``wilcoxon``). None (no limit) when the file does not say how many
    epochs a trial runs."""
    return max(1, epochs - 1) if epochs is not None else None


def _first_rung(epochs: int | None, kwargs: Mapping[str, Any]) -> int:
    """``mo_asha``'s first rung (``min_resource``): a tenth of the epochs (at least 1; 1 when
    the file does not say). A trial reporting steps 0..E-1 is never stopped at its last, one
    reporting 1..E not at its last two. On LCBench (52 epochs) a first rung at epoch 5 was
    ahead of no pruning under every sampler on two sets of tasks, one at epoch 1 (MO-ASHA's own
    default) behind it under TPE on both (docs/multi-objective-pruning.md): learning curves
    still cross in their first epochs."""
    return max(1, epochs // 10) if epochs is not None else 1


# The rules the registry's rows name (dvt_hpo.sampling.kinds.Derivation): the value of an
# argument from the epochs a trial runs and the file's other arguments, None to leave it out.
_DERIVE: dict[Derivation, Callable[[int | None, Mapping[str, Any]], int | None]] = {
    "epochs": _all_epochs,
    "below_last_epoch": _below_last_epoch,
    "first_rung": _first_rung,
}
