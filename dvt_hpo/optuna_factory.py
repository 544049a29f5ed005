"""Optuna samplers and pruners from their study.yaml ``kind`` and keyword arguments.

The spec loader checks arguments against the real class signatures found here, so a typo is
reported before a study is created; the runner builds the objects with :func:`build_sampler` and
:func:`build_pruner`. Nothing here imports torch: samplers that need an extra package (``gp``
needs torch and scipy) are only probed with :func:`importlib.util.find_spec`.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import optuna

from dvt_hpo import space

if TYPE_CHECKING:
    from dvt_hpo.spec.model import Dimension, PrunerSpec, SamplerSpec

__all__ = [
    "PRUNER_CLASSES",
    "PRUNER_PACKAGES",
    "SAMPLER_CLASSES",
    "SAMPLER_PACKAGES",
    "BUILT_ARGUMENTS",
    "build_pruner",
    "build_sampler",
    "missing_packages",
    "pruner_class",
    "sampler_class",
    "yaml_parameters",
]

# kind -> class name in optuna.samplers / optuna.pruners (looked up lazily with getattr, so an
# Optuna release without one of them only loses that kind).
SAMPLER_CLASSES: dict[str, str] = {
    "tpe": "TPESampler",
    "random": "RandomSampler",
    "cmaes": "CmaEsSampler",
    "qmc": "QMCSampler",
    "gp": "GPSampler",
    "grid": "GridSampler",
    "nsga2": "NSGAIISampler",
    "bruteforce": "BruteForceSampler",
}
PRUNER_CLASSES: dict[str, str] = {
    "median": "MedianPruner",
    "percentile": "PercentilePruner",
    "successive_halving": "SuccessiveHalvingPruner",
    "hyperband": "HyperbandPruner",
    "threshold": "ThresholdPruner",
    "wilcoxon": "WilcoxonPruner",
    "none": "NopPruner",
}
# Packages a kind imports when it first samples or prunes (not when it is constructed).
SAMPLER_PACKAGES: dict[str, tuple[str, ...]] = {
    "cmaes": ("cmaes",),
    "qmc": ("scipy",),
    "gp": ("torch", "scipy"),
}
PRUNER_PACKAGES: dict[str, tuple[str, ...]] = {"wilcoxon": ("scipy",)}
# Arguments dvt-hpo fills in itself: GridSampler's grid comes from the search space.
BUILT_ARGUMENTS: dict[str, tuple[str, ...]] = {"grid": ("search_space",)}
# Kinds whose seed gets the resume offset. QMC and grid are left alone: they continue from what
# the study storage says was already sampled, and a new seed would restart their sequence.
_OFFSET_SEED_KINDS = frozenset({"tpe", "random", "cmaes", "gp", "nsga2", "bruteforce"})


def sampler_class(kind: str) -> type:
    """The Optuna sampler class of ``kind`` (``KeyError`` for an unknown kind)."""
    cls = getattr(optuna.samplers, SAMPLER_CLASSES[kind], None)
    if cls is None:  # pragma: no cover - depends on the Optuna release
        raise KeyError(f"this Optuna release ({optuna.__version__}) has no sampler {kind!r}")
    return cls


def pruner_class(kind: str) -> type:
    """The Optuna pruner class of ``kind`` (``KeyError`` for an unknown kind)."""
    cls = getattr(optuna.pruners, PRUNER_CLASSES[kind], None)
    if cls is None:  # pragma: no cover - depends on the Optuna release
        raise KeyError(f"this Optuna release ({optuna.__version__}) has no pruner {kind!r}")
    return cls


def missing_packages(names: Sequence[str]) -> list[str]:
    """The packages of ``names`` that cannot be found (without importing any of them)."""
    return [name for name in names if importlib.util.find_spec(name) is None]


def yaml_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The keyword parameters of ``cls.__init__`` (``self`` and ``*args``/``**kwargs`` left out)."""
    params = inspect.signature(cls).parameters
    return {
        name: p
        for name, p in params.items()
        if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    }


def build_sampler(
    spec: SamplerSpec,
    dimensions: Sequence[Dimension],
    *,
    seed_offset: int = 0,
    parallel: int = 1,
) -> optuna.samplers.BaseSampler:
    """The sampler of ``spec``.

    - ``seed`` becomes ``seed + seed_offset`` (the runner passes the number of the first trial
      this worker asked: unique among concurrent workers, 0 for a fresh study, and past the
      existing trials on a resume, so workers and resumes never replay each other's points);
    - TPE gets ``constant_liar=True`` when ``parallel > 1`` unless the spec sets it, so that
      concurrent trials do not all sample the same promising point;
    - ``grid`` gets its ``search_space`` from the dimensions (every value each can take).
    """
    kwargs: dict[str, Any] = dict(spec.kwargs)
    if spec.kind in _OFFSET_SEED_KINDS and kwargs.get("seed") is not None and seed_offset:
        kwargs["seed"] = int(kwargs["seed"]) + int(seed_offset)
    if spec.kind == "tpe" and parallel > 1:
        kwargs.setdefault("constant_liar", True)
    if spec.kind == "grid":
        grid: dict[str, list[Any]] = {}
        for dim in dimensions:
            values = space.grid_values(dim)
            if values is None:
                raise ValueError(
                    f"sampler kind 'grid' needs every dimension enumerable; float dimension "
                    f"{dim.name!r} has no step"
                )
            grid[dim.name] = values
        kwargs["search_space"] = grid
    return sampler_class(spec.kind)(**kwargs)


def build_pruner(spec: PrunerSpec) -> optuna.pruners.BasePruner:
    """The pruner of ``spec`` (``none`` is Optuna's ``NopPruner``)."""
    kwargs: Mapping[str, Any] = spec.kwargs
    return pruner_class(spec.kind)(**kwargs)
