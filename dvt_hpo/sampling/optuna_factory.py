"""Optuna samplers and pruners from their study.yaml ``kind`` and keyword arguments.

The spec loader checks arguments against the real class signatures found here, so a typo is
reported before a study is created; the runner builds the objects with :func:`build_sampler` and
:func:`build_pruner`. Nothing here imports torch: samplers that need an extra package (``gp``
needs torch and scipy) are only probed with :func:`importlib.util.find_spec`.
"""

from __future__ import annotations

import importlib.util
import inspect
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import optuna

from dvt_hpo.optuna_api.private import single_objective_only
from dvt_hpo.sampling import space

if TYPE_CHECKING:
    from dvt_hpo.spec.model import Dimension, PrunerSpec, SamplerSpec

__all__ = [
    "PRUNER_CLASSES",
    "PRUNER_PACKAGES",
    "SAMPLER_CLASSES",
    "SAMPLER_PACKAGES",
    "BUILT_ARGUMENTS",
    "build_pruner",
    "accepts_constraints",
    "build_sampler",
    "missing_packages",
    "pruner_class",
    "sampler_class",
    "samplers_read_constraints",
    "supports_multi_objective",
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
    "nsga3": "NSGAIIISampler",
    "bruteforce": "BruteForceSampler",
    "rung_tpe": "RungTPESampler",  # TPE on values at a rung: dvt_hpo.sampling.rung_tpe
    # A GP over (config, epoch) fitted on every curve: dvt_hpo.sampling.mf_gp
    "mf_gp": "MultiFidelityGPSampler",
}
PRUNER_CLASSES: dict[str, str] = {
    "median": "MedianPruner",
    "percentile": "PercentilePruner",
    "successive_halving": "SuccessiveHalvingPruner",
    "hyperband": "HyperbandPruner",
    "threshold": "ThresholdPruner",
    "wilcoxon": "WilcoxonPruner",
    # The default: successive halving's rungs and the Wilcoxon test, either stopping a trial
    # (dvt_hpo.sampling.wilcoxon_halving).
    "wilcoxon_halving": "WilcoxonHalvingPruner",
    "mo_asha": "MOASHAPruner",  # several objectives only: dvt_hpo.sampling.mo_pruner
    "none": "NopPruner",
}
# Packages a kind imports when it first samples or prunes (not when it is constructed).
SAMPLER_PACKAGES: dict[str, tuple[str, ...]] = {
    "cmaes": ("cmaes",),
    "qmc": ("scipy",),
    "gp": ("torch", "scipy"),
    "mf_gp": ("scipy",),
}
PRUNER_PACKAGES: dict[str, tuple[str, ...]] = {
    "wilcoxon": ("scipy",),
    "wilcoxon_halving": ("scipy",),
}
# Arguments dvt-hpo fills in itself: GridSampler's grid comes from the search space.
BUILT_ARGUMENTS: dict[str, tuple[str, ...]] = {"grid": ("search_space",)}
# Kinds whose seed gets the resume offset. QMC and grid are left alone: they continue from what
# the study storage says was already sampled, and a new seed would restart their sequence.
_OFFSET_SEED_KINDS = frozenset(
    {"tpe", "rung_tpe", "mf_gp", "random", "cmaes", "gp", "nsga2", "nsga3", "bruteforce"}
)
# Kinds whose Optuna class raises on a multi-objective study (found in its source when the
# source can be read; this list is the fallback).
_SINGLE_OBJECTIVE_KINDS = frozenset({"cmaes", "rung_tpe", "mf_gp"})


def sampler_class(kind: str) -> type:
    """The Optuna sampler class of ``kind`` (``KeyError`` for an unknown kind); ``rung_tpe`` is
    TPE fitted on the values at a rung (:mod:`dvt_hpo.sampling.rung_tpe`)."""
    if kind == "rung_tpe":
        from dvt_hpo.sampling.rung_tpe import RungTPESampler

        return RungTPESampler
    if kind == "mf_gp":
        from dvt_hpo.sampling.mf_gp import MultiFidelityGPSampler

        return MultiFidelityGPSampler
    cls = getattr(optuna.samplers, SAMPLER_CLASSES[kind], None)
    if cls is None:  # pragma: no cover - depends on the Optuna release
        raise KeyError(f"this Optuna release ({optuna.__version__}) has no sampler {kind!r}")
    return cls


def pruner_class(kind: str) -> type:
    """The Optuna pruner class of ``kind`` (``KeyError`` for an unknown kind); ``wilcoxon`` is
    Optuna's with scipy's slow exact test computed at once (:mod:`dvt_hpo.sampling.wilcoxon`);
    ``wilcoxon_halving`` is that test and successive halving together, the default
    (:mod:`dvt_hpo.sampling.wilcoxon_halving`); ``mo_asha`` prunes several objectives
    (:mod:`dvt_hpo.sampling.mo_pruner`)."""
    if kind == "wilcoxon":
        from dvt_hpo.sampling.wilcoxon import WilcoxonPruner

        return WilcoxonPruner
    if kind == "wilcoxon_halving":
        from dvt_hpo.sampling.wilcoxon_halving import WilcoxonHalvingPruner

        return WilcoxonHalvingPruner
    if kind == "mo_asha":
        from dvt_hpo.sampling.mo_pruner import MOASHAPruner

        return MOASHAPruner
    cls = getattr(optuna.pruners, PRUNER_CLASSES[kind], None)
    if cls is None:  # pragma: no cover - depends on the Optuna release
        raise KeyError(f"this Optuna release ({optuna.__version__}) has no pruner {kind!r}")
    return cls


def supports_multi_objective(kind: str) -> bool:
    """Whether the sampler of ``kind`` accepts a study with several objectives. Optuna's
    single-objective samplers call a private check (:func:`single_objective_only`);
    ``rung_tpe`` ranks trials by one value at a rung."""
    if kind in ("rung_tpe", "mf_gp"):
        return False
    try:
        return not single_objective_only(sampler_class(kind))
    except (OSError, TypeError, KeyError):
        return kind not in _SINGLE_OBJECTIVE_KINDS


def accepts_constraints(kind: str) -> bool:
    """Whether the sampler of ``kind`` takes a ``constraints_func`` (TPE, NSGA-II/III, GP)."""
    try:
        return "constraints_func" in yaml_parameters(sampler_class(kind))
    except KeyError:
        return False


def samplers_read_constraints() -> bool:
    """Whether this Optuna's samplers read a trial's stored constraint values without a
    ``constraints_func`` (Optuna 5, which added ``Trial.set_constraint`` with it)."""
    return hasattr(optuna.trial.Trial, "set_constraint")


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
    constrained: bool = False,
) -> optuna.samplers.BaseSampler:
    """The sampler of ``spec``.

    - ``seed`` becomes ``seed + seed_offset`` (the runner passes the number of the first trial
      this worker asked: unique among concurrent workers, 0 for a fresh study, and past the
      existing trials on a resume, so workers and resumes never replay each other's points);
    - TPE gets ``constant_liar=True`` when ``parallel > 1`` unless the spec sets it, so that
      concurrent trials do not all sample the same promising point;
    - ``grid`` gets its ``search_space`` from the dimensions (every value each can take);
    - ``constrained``: the study loop stores each trial's constraint values before telling it
      (:mod:`dvt_hpo.sampling.constraints`). Optuna 5's samplers read them themselves (and deprecate
      ``constraints_func``); under Optuna 4 samplers that accept one get a ``constraints_func``
      reading them back.
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
    if constrained and accepts_constraints(spec.kind) and not samplers_read_constraints():
        from dvt_hpo.sampling.constraints import stored_constraints

        kwargs["constraints_func"] = stored_constraints
    return sampler_class(spec.kind)(**kwargs)


def build_pruner(spec: PrunerSpec) -> optuna.pruners.BasePruner:
    """The pruner of ``spec`` (``none`` is Optuna's ``NopPruner``).

    Optuna marks ``WilcoxonPruner`` experimental (its interface may change); it is dvt-hpo's
    default, whose arguments the loader checks against the installed class, so the warning
    would only repeat on every run."""
    kwargs: Mapping[str, Any] = spec.kwargs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return pruner_class(spec.kind)(**kwargs)
