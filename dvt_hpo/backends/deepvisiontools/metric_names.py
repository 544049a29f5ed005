"""The metric names a deepvisiontools trial reports, known from its config (stdlib only), for
the check of :mod:`dvt_hpo.spec.known_metrics`.

Ours (:mod:`~dvt_hpo.backends.deepvisiontools.scoring`) are known exactly: ``train_loss``
always; with a validation set ``loss``, and for ``semantic_mask`` (the only task with a
confusion matrix) ``macro_f1``, ``macro_f1_foreground`` and ``accuracy``. The library's own
names (``valid/f1/macro``, ``valid/iou/cls1``, ``train/loss``) depend on its metric suite and
the model's loss terms, so any name under ``train/`` (and ``valid/`` with a validation set) is
accepted unchecked. ``n_params`` and ``epochs_run`` are only in the returned metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dvt_hpo.spec.known_metrics import KnownMetrics

__all__ = ["known_metrics"]

_CONFUSION = ("macro_f1", "macro_f1_foreground", "accuracy")
_ORDER = ("loss", "train_loss", *_CONFUSION, "n_params", "epochs_run")


def known_metrics(config: Mapping[str, Any]) -> KnownMetrics:
    data = config.get("data") or {}
    settings = config.get("settings") or {}
    evaluation = config.get("eval") or {}
    task = settings.get("task", "semantic_mask")
    valid = bool(data.get("valid"))
    evaluated = evaluation.get("eval_on", "valid") in ("valid", "valid_and_train")
    epoch = {"train_loss"}
    prefixes = ["train/"]
    how: dict[str, str] = {}
    if valid:
        epoch.add("loss")
        prefixes.append("valid/")
    else:
        for name in ("loss", *_CONFUSION):
            how[name] = "give trainer.config.data.valid (a validation set): it is measured on it"
    if valid and task == "semantic_mask" and evaluated:
        epoch.update(_CONFUSION)
    elif valid and task != "semantic_mask":
        for name in _CONFUSION:
            how[name] = (
                f"it comes from the confusion matrix of task semantic_mask, not {task}; use "
                "the library's own metrics (valid/...)"
            )
    elif valid:
        for name in _CONFUSION:
            how[name] = "set trainer.config.eval.eval_on: valid (or valid_and_train)"
    return KnownMetrics(
        trainer="the deepvisiontools backend",
        epoch=frozenset(epoch),
        final=frozenset({"n_params", "epochs_run"}),
        open_prefixes=tuple(prefixes),
        order=_ORDER,
        how=how,
    )
