"""Per-epoch metrics of a deepvisiontools training, as the flat dict ``ctx.report`` takes.

Pure (stdlib only): the trainer hands over the epoch's confusion matrix as a list of lists
and the library's ``MetricsMonitor`` stores as plain mappings.

Keys reported:

- ``macro_f1``: :func:`dvt_hpo.metrics.macro_f1` over the per-class tp/fp/fn of the whole
  validation set's confusion matrix (rows truth, columns prediction, as deepvisiontools'
  ``SemanticAccumulator.conf_mat``). **Background counts as a class**: class 0 of a semantic
  mask is the background (deepvisiontools' ``num_classes`` excludes it; its binary case,
  ``num_classes: 1``, is a 2x2 matrix). Every class of the matrix enters the mean, also one
  absent from both truth and predictions (F1 0, scikit-learn's ``labels=range(C)``).
- ``macro_f1_foreground``: the same mean without class 0 (for ``num_classes: 1`` the
  foreground F1). Background pixels usually dominate, so this is the one that moves.
- ``accuracy``: pixel accuracy from the same matrix.
- ``loss``: the validation loss (``valid/loss``), so ``objective.metric: loss`` works as with
  the built-in trainer; ``train_loss`` the training loss.
- every key of the library's own metrics (``valid/f1/macro``, ``valid/iou/cls1``, ...) and
  losses (``valid/loss``, ``train/loss``; a loss with several terms gives
  ``valid/loss/<term>``), unchanged. Note deepvisiontools' ``f1/macro`` averages only the
  classes present in the truth, so it can differ from ``macro_f1``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dvt_hpo.metrics import (
    accuracy_from_confusion_matrix,
    counts_from_confusion_matrix,
    macro_f1,
)


def confusion_metrics(matrix: Sequence[Sequence[int]]) -> dict[str, float]:
    """``macro_f1``, ``macro_f1_foreground`` and ``accuracy`` of a confusion matrix."""
    counts = counts_from_confusion_matrix(matrix)
    out = {"macro_f1": macro_f1(counts)}
    if len(counts) > 1:
        out["macro_f1_foreground"] = macro_f1(counts[1:])
    out["accuracy"] = accuracy_from_confusion_matrix(matrix)
    return out


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number


def library_metrics(
    losses: Mapping[str, Any] | None, metrics: Mapping[str, Any] | None
) -> dict[str, float]:
    """The library's losses and metrics of one epoch, flattened to ``name: number``."""
    out: dict[str, float] = {}
    for name, value in (losses or {}).items():
        if isinstance(value, Mapping):
            if set(value) == {"loss"}:
                number = _number(value["loss"])
                if number is not None:
                    out[str(name)] = number
                continue
            for term, inner in value.items():
                number = _number(inner)
                if number is not None:
                    out[f"{name}/{term}"] = number
        else:
            number = _number(value)
            if number is not None:
                out[str(name)] = number
    for name, value in (metrics or {}).items():
        number = _number(value)
        if number is not None:
            out[str(name)] = number
    return out


def _total_loss(flat: Mapping[str, float], split: str) -> float | None:
    if split in flat:
        return flat[split]
    # A loss of several terms: deepvisiontools' total is the term named "loss" when present.
    return flat.get(f"{split}/loss")


def epoch_metrics(
    losses: Mapping[str, Any] | None,
    metrics: Mapping[str, Any] | None,
    matrix: Sequence[Sequence[int]] | None,
) -> dict[str, float]:
    """Everything one epoch reports (see the module docstring)."""
    out = library_metrics(losses, metrics)
    valid = _total_loss(out, "valid/loss")
    if valid is not None:
        out["loss"] = valid
    train = _total_loss(out, "train/loss")
    if train is not None:
        out["train_loss"] = train
    if matrix is not None and sum(map(sum, matrix)) > 0:
        out.update(confusion_metrics(matrix))
    return out


__all__ = ["confusion_metrics", "epoch_metrics", "library_metrics"]
