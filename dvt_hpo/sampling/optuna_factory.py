"""Optuna samplers and pruners from their study.yaml ``kind`` and keyword arguments.

Each kind's class, packages and seed rule are its row in :mod:`dvt_hpo.sampling.kinds`. The
spec loader checks arguments against the real class signatures found here, so a typo is
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
from dvt_hpo.sampling.kinds import PRUNERS, SAMPLERS

if TYPE_CHECKING:
    from dvt_hpo.spec.model import Dimension, PrunerSpec, SamplerSpec

__all__ = [
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


def sampler_class(kind: str) -> type:
    """The sampler class of ``kind`` (``KeyError`` for an unknown kind): its row in
    :data:`~dvt_hpo.sampling.kinds.SAMPLERS` loads it."""
    return SAMPLERS[kind].load()


def pruner_class(kind: str) -> type:
    """The pruner class of ``kind`` (``KeyError`` for an unknown kind): its row in
    :data:`~dvt_hpo.sampling.kinds.PRUNERS` loads it."""
    return PRUNERS[kind].load()


def supports_multi_objective(kind: str) -> bool:
    """Whether the sampler of ``kind`` accepts a study with several objectives. Optuna's
    single-objective samplers call a private check (:func:`single_objective_only`); dvt-hpo's
    own say so in their row (``rung_tpe`` ranks trials by one value at a rung), which is also
    the answer when an Optuna class's source cannot be read."""
    row = SAMPLERS.get(kind)
    if row is None:
        return True  # an unknown kind: the loader names the kinds
    if not row.module.startswith("optuna."):
        return row.objectives != "one"
    try:
        return not single_objective_only(row.load())
    except (OSError, TypeError, KeyError):
        return row.objectives != "one"


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
    - the row's :attr:`~dvt_hpo.sampling.kinds.Kind.when_parallel` arguments when
      ``parallel > 1``, unless the spec sets them (TPE's ``constant_liar``, so that concurrent
      trials do not all sample the same promising point);
    - ``grid`` gets its ``search_space`` from the dimensions (every value each can take);
    - ``constrained``: the study loop stores each trial's constraint values before telling it
      (:mod:`dvt_hpo.sampling.constraints`). Optuna 5's samplers read them themselves (and deprecate
      ``constraints_func``); under Optuna 4 samplers that accept one get a ``constraints_func``
      reading them back.
    """
    row = SAMPLERS[spec.kind]
    kwargs: dict[str, Any] = row.parallel_kwargs(spec.kwargs, parallel)
    if row.offset_seed and kwargs.get("seed") is not None and seed_offset:
        kwargs["seed"] = int(kwargs["seed"]) + int(seed_offset)
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
    with warnings.catch_warnings():
        # Optuna 4.9 deprecates consider_endpoints, which the constrained default sets (the
        # measured choice): said on every run of a study that set nothing, it would only alarm.
        warnings.filterwarnings("ignore", message=".*consider_endpoints", category=FutureWarning)
        return sampler_class(spec.kind)(**kwargs)


def build_pruner(spec: PrunerSpec) -> optuna.pruners.BasePruner:
    """The pruner of ``spec`` (``none`` is Optuna's ``NopPruner``).

    Optuna marks ``WilcoxonPruner`` experimental (its interface may change); the loader checks
    its arguments against the installed class, so the warning would only repeat on every
    run."""
    kwargs: Mapping[str, Any] = spec.kwargs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return pruner_class(spec.kind)(**kwargs)
