"""study.yaml -> typed, validated :class:`StudySpec` (the package of the study-file loader).

Import-light: the dataclasses of :mod:`dvt_hpo.spec.model` are re-exported eagerly (stdlib
only); everything that needs optuna or yaml loads on first use, so ``import dvt_hpo.studyfile``
imports neither (the trial process imports :mod:`dvt_hpo.spec.model` itself).

Layout: ``fields`` (the field readers and error placement), ``study`` (study, storage,
tracking), ``urls`` (``study.storage`` URLs), ``objective`` (metric, direction rule), ``trials``
(trials, devices, memory), ``search`` (search space and ``when``), ``batch`` (batch size),
``cluster`` (``dvt-hpo submit``'s scheduler), ``trainer`` (trainer config and schema),
``command`` (``trainer.command``), ``defaults`` (derived settings) and ``load``
(:func:`load_spec`). The YAML reader is :mod:`dvt_hpo.config.source`; what run and validate
check beyond the file is :mod:`dvt_hpo.run.preflight`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dvt_hpo.spec.model import (
    BUILTIN_ENTRYPOINT,
    COMMAND_ENTRYPOINT,
    BatchSizeSpec,
    ClusterSpec,
    Condition,
    ConstraintSpec,
    Dimension,
    MetricSpec,
    MlflowSpec,
    ObjectiveSpec,
    PlateauSpec,
    PrunerSpec,
    SamplerSpec,
    StudySection,
    StudySpec,
    TrackingSpec,
    TrainerSpec,
    TrialsSpec,
)

if TYPE_CHECKING:
    from dvt_hpo.config.source import OVERRIDE_SOURCE
    from dvt_hpo.sampling.optuna_factory import build_pruner, build_sampler
    from dvt_hpo.studyfile.load import load_spec, spec_to_dict

_LAZY = {
    "load_spec": ("dvt_hpo.studyfile.load", "load_spec"),
    "spec_to_dict": ("dvt_hpo.studyfile.load", "spec_to_dict"),
    "build_sampler": ("dvt_hpo.sampling.optuna_factory", "build_sampler"),
    "build_pruner": ("dvt_hpo.sampling.optuna_factory", "build_pruner"),
    "OVERRIDE_SOURCE": ("dvt_hpo.config.source", "OVERRIDE_SOURCE"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'dvt_hpo.studyfile' has no attribute {name!r}")


__all__ = [
    "BUILTIN_ENTRYPOINT",
    "COMMAND_ENTRYPOINT",
    "OVERRIDE_SOURCE",
    "BatchSizeSpec",
    "ClusterSpec",
    "Condition",
    "ConstraintSpec",
    "Dimension",
    "MetricSpec",
    "MlflowSpec",
    "ObjectiveSpec",
    "PlateauSpec",
    "PrunerSpec",
    "SamplerSpec",
    "StudySection",
    "StudySpec",
    "TrackingSpec",
    "TrainerSpec",
    "TrialsSpec",
    "build_pruner",
    "build_sampler",
    "load_spec",
    "spec_to_dict",
]
