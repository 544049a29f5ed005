"""The metric names the built-in trainer reports, known from its config before any training.

Stdlib only: ``validate`` and ``run`` refuse an objective or constraint naming a metric the
trainer never reports (:mod:`dvt_hpo.spec.known_metrics`), instead of training every trial to
the end and failing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dvt_hpo.spec.known_metrics import KnownMetrics

__all__ = ["LEARNED", "MEASURED", "known_metrics"]

# What each epoch's evaluation reports (the trainer keeps exactly these keys).
LEARNED = ("loss", "train_loss", "accuracy", "macro_f1")
# What :mod:`dvt_hpo.train.measure` adds to every epoch; latency_ms only when it is measured.
MEASURED = ("n_params", "epoch_s", "peak_memory_mb", "latency_ms")
_LATENCY_PATH = "trainer.config.eval.latency.enabled"


def known_metrics(config: Mapping[str, Any]) -> KnownMetrics:
    """What a trial of ``config`` (a normalized :class:`~dvt_hpo.train.TrainerConfig`) reports
    each epoch; ``epochs_run`` only in the metrics it returns."""
    latency = bool(config.get("eval", {}).get("latency", {}).get("enabled", True))
    epoch = [*LEARNED, *(m for m in MEASURED if latency or m != "latency_ms")]
    return KnownMetrics(
        trainer="the built-in trainer",
        epoch=frozenset(epoch),
        final=frozenset({"epochs_run"}),
        order=(*LEARNED, *MEASURED, "epochs_run"),
        how={} if latency else {"latency_ms": f"set {_LATENCY_PATH}: true"},
    )
