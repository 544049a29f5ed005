"""The sampler and pruner kinds a study file may name: one row per kind, and the defaults.

Every place that knows a kind reads its row here: the factory (its class loader, seed rule
and the arguments parallel trials get, :mod:`dvt_hpo.sampling.optuna_factory`), the study-file
loader and ``validate`` (the kinds, the packages a kind needs, the arguments dvt-hpo builds,
the objectives it supports, :mod:`dvt_hpo.studyfile.study`; the arguments derived from the
trainer's epochs, :mod:`dvt_hpo.studyfile.defaults`), the start line (its display name, the
arguments always shown, :mod:`dvt_hpo.study.messages`), the generated study.yaml reference (its
reference text, :mod:`dvt_hpo.studyfile.reference`) and the trial lines (its class name). A new
kind is one row.

The defaults are one table too, :data:`DEFAULTS`, by the study's shape: the sampler and pruner a
study file that names neither gets (:func:`default_algorithms`), and every text that names them
(the reference, ``validate``'s messages, the start line) is made from it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from dvt_hpo.spec.model import PrunerSpec, SamplerSpec

__all__ = [
    "DEFAULTS",
    "MULTI_OBJECTIVE_PRUNERS",
    "PRUNERS",
    "SAMPLERS",
    "SHORT_CURVE_EPOCHS",
    "Derivation",
    "Kind",
    "accepts_text",
    "default_algorithms",
    "default_text",
    "shape_of",
]

Objectives = Literal["one", "several", "any"]
# How the study-file loader derives an argument from the epochs a trial runs, where the file
# leaves it out (the rules: dvt_hpo.studyfile.defaults):
# - "epochs": the epochs (Hyperband's brackets right from the first trial, not guessed by
#   Optuna from the first finished one);
# - "below_last_epoch": the epochs - 1, so that no rung or test decides at a trial's last
#   report, when it has trained every epoch;
# - "first_rung": a tenth of the epochs (MO-ASHA's first rung: curves still cross in their first
#   epochs).
Derivation = Literal["epochs", "below_last_epoch", "first_rung"]


@dataclass(frozen=True)
class Kind:
    """One sampler or pruner kind of a study file."""

    name: str  # what the study file writes (`kind: tpe`)
    class_name: str  # the class, in optuna.samplers / optuna.pruners or dvt-hpo's own module
    module: str  # where the class is: optuna.samplers, optuna.pruners or dvt-hpo's module
    display: str  # how the start line and `validate` name it
    reference: str = ""  # what the study.yaml reference says of it beyond its name
    packages: tuple[str, ...] = ()  # imported when it first samples or prunes
    # The seed rule: the seed gets the worker's first trial number added (workers and resumes
    # never replay each other's points). QMC and grid are left alone: they continue from what
    # the study storage says was already sampled, and a new seed would restart their sequence.
    offset_seed: bool = False
    # The objectives it supports (for an Optuna sampler, the fallback when its source cannot be
    # read: the factory asks the class itself).
    objectives: Objectives = "any"
    shown_always: tuple[str, ...] = ()  # shown by the start line even when left to the class
    built: tuple[str, ...] = ()  # arguments dvt-hpo fills in itself (grid's search_space)
    # Arguments the loader derives from the study file, in order, and how (:data:`Derivation`).
    derived: tuple[tuple[str, Derivation], ...] = ()
    # A pruner that asks the sampler for its decision: the sampler kind it needs.
    needs_sampler: str | None = None
    # Arguments it gets when trials run in parallel, unless the file sets them.
    when_parallel: tuple[tuple[str, Any], ...] = ()

    @property
    def derived_arguments(self) -> tuple[str, ...]:
        return tuple(argument for argument, _ in self.derived)

    def parallel_kwargs(self, kwargs: Mapping[str, Any], parallel: int) -> dict[str, Any]:
        """``kwargs`` with :attr:`when_parallel` filled in where they leave it, when
        ``parallel`` trials run at once."""
        out = dict(kwargs)
        if parallel > 1:
            for argument, value in self.when_parallel:
                out.setdefault(argument, value)
        return out

    def load(self) -> type:
        """The class (``KeyError`` when this Optuna release has none of that name)."""
        cls = getattr(importlib.import_module(self.module), self.class_name, None)
        if cls is None:  # pragma: no cover - depends on the Optuna release
            import optuna

            what = "sampler" if self.module == "optuna.samplers" else "pruner"
            raise KeyError(
                f"this Optuna release ({optuna.__version__}) has no {what} {self.name!r}"
            )
        return cls


_S = "optuna.samplers"
_P = "optuna.pruners"
# Looked up lazily (Kind.load), so an Optuna release without one of them only loses that kind.
SAMPLERS: dict[str, Kind] = {
    k.name: k
    for k in (
        # Parallel trials would all sample the same promising point without the constant liar.
        Kind("tpe", "TPESampler", _S, "TPE", offset_seed=True, shown_always=("multivariate",),
             when_parallel=(("constant_liar", True),)),
        Kind("random", "RandomSampler", _S, "random", offset_seed=True),
        Kind("cmaes", "CmaEsSampler", _S, "CMA-ES", packages=("cmaes",), offset_seed=True,
             objectives="one"),
        Kind("qmc", "QMCSampler", _S, "QMC", packages=("scipy",)),
        Kind("gp", "GPSampler", _S, "GP", packages=("torch", "scipy"), offset_seed=True),
        Kind("grid", "GridSampler", _S, "grid", built=("search_space",)),
        Kind("nsga2", "NSGAIISampler", _S, "NSGA-II", offset_seed=True),
        Kind("nsga3", "NSGAIIISampler", _S, "NSGA-III", offset_seed=True),
        Kind("bruteforce", "BruteForceSampler", _S, "brute force", offset_seed=True),
        Kind(
            "rung_tpe",
            "RungTPESampler",
            "dvt_hpo.sampling.rung_tpe",
            "rung TPE",
            reference="TPE fitted on each trial's value at the highest epoch `min_trials` "
            "finished trials reached, pruned ones included",
            offset_seed=True,
            objectives="one",
            shown_always=("min_trials",),
        ),
        Kind(
            "mf_gp",
            "MultiFidelityGPSampler",
            "dvt_hpo.sampling.mf_gp",
            "multi-fidelity GP",
            reference="a GP over (config, epoch) fitted on every trial's curve, as MOBSTER's",
            packages=("scipy",),
            offset_seed=True,
            objectives="one",
        ),
    )
}  # fmt: skip
PRUNERS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("median", "MedianPruner", _P, "median", objectives="one"),
        Kind("percentile", "PercentilePruner", _P, "percentile", objectives="one"),
        Kind("successive_halving", "SuccessiveHalvingPruner", _P, "successive halving",
             objectives="one"),
        Kind("hyperband", "HyperbandPruner", _P, "Hyperband", objectives="one",
             derived=(("max_resource", "epochs"),)),
        Kind("threshold", "ThresholdPruner", _P, "threshold", objectives="one"),
        Kind(
            "wilcoxon",
            "WilcoxonPruner",
            "dvt_hpo.sampling.wilcoxon",
            "Wilcoxon",
            reference="a trial's curve against the best trial's, stopped once significantly "
            "worse",
            packages=("scipy",),
            objectives="one",
            shown_always=("p_threshold",),
            derived=(("max_resource", "below_last_epoch"),),
        ),
        Kind(
            "wilcoxon_halving",
            "WilcoxonHalvingPruner",
            "dvt_hpo.sampling.wilcoxon_halving",
            "Wilcoxon + successive halving",
            reference="successive halving's rungs and the Wilcoxon test, either stopping a trial",
            packages=("scipy",),
            objectives="one",
            shown_always=("p_threshold", "min_resource", "reduction_factor"),
            derived=(("max_resource", "below_last_epoch"),),
        ),
        Kind(
            "mo_asha",
            "MOASHAPruner",
            "dvt_hpo.sampling.mo_pruner",
            "MO-ASHA",
            reference="several objectives: a trial dominated by the others at its rung stops",
            objectives="several",
            derived=(("min_resource", "first_rung"), ("max_resource", "below_last_epoch")),
        ),
        Kind(
            "gp_chance",
            "GPChancePruner",
            "dvt_hpo.sampling.gp_chance",
            "GP chance",
            reference="with sampler `mf_gp`: a trial stopped once the GP gives it less than "
            "`min_chance` of ending best",
            packages=("scipy",),
            objectives="one",
            shown_always=("min_chance",),
            derived=(("max_resource", "below_last_epoch"),),
            needs_sampler="mf_gp",
        ),
        Kind("none", "NopPruner", _P, "none", reference="no pruning"),
    )
}  # fmt: skip
# Pruners for several objectives (Optuna prunes one objective only; these decide themselves).
MULTI_OBJECTIVE_PRUNERS = tuple(k for k, row in PRUNERS.items() if row.objectives == "several")

# -- the defaults ----------------------------------------------------------------------------

Shape = Literal["one objective", "short curves", "constrained", "several objectives"]

# A trial that reports at most this many epochs (the file's trainer.config.epochs) has a short
# curve: the search suite's 10-step families, where the GP without a pruner ended ahead of
# every pruned cell on the selection half; its 52-epoch family kept the Wilcoxon test. LCBench
# cut to 20 and to 30 epochs (round 9) placed the line: at 20 both met every goal on the
# selection half and the GP without a pruner ended lower; at 30 the Wilcoxon test reached TPE's
# final regret in half the budget the other needed.
SHORT_CURVE_EPOCHS = 20

# What a study file that names no sampler or pruner gets, by the study's shape: the one place
# to change a default. Chosen on the selection half of the search suite (benchmarks/search/;
# docs/performance/search-efficiency.md), reported on its other half. For one objective with
# long curves (or a file that does not say how long): a GP over (config, epoch) fitted on every
# trial's curve, stopped ones included, with the Wilcoxon test against the best trial (on
# LCBench's report half, TPE without pruning's final regret in 33 % of the budget). With short
# curves (at most SHORT_CURVE_EPOCHS epochs): the same GP without pruning, the best cell at 50
# and 100 % of the budget on all three short-curve families of the selection half (24 tasks x 5
# seeds, 11 cells); on 10 steps a pruner stops trials on too little of their curve (round 11,
# 50 seeds on four 10-step families: the GP with the median pruner ended behind TPE without
# pruning on all four, with the Wilcoxon test on both built-in trainer tables). The GP's own
# stopping rule (gp_chance, round 12) met more goals on the selection half, but on the report
# half it ended behind TPE without pruning on the built-in trainer's 1,000-config table, the
# family closest to a user's training, where the GP without pruning tied it: it stays a kind a
# study file names, not the default (docs/performance/search-efficiency.md); deciding from a
# trial's 3rd report (min_reports, round 13) removed that loss but missed, by the margin the GP
# without pruning misses it too, a rule written in advance (no worse than TPE's median there).
# Its 10
# random trials stay (round 9): one more than the modelled parameters helped the trainsize
# surrogates but ended behind TPE on the built-in trainer's 1,000-config table, where 10 tied
# it. A conditional parameter one categorical decides is in the GP's model (round 10): on the
# suite's learner-choice family, where 7 of 8 parameters are conditional, the GP that left them
# to univariate TPE ended behind TPE without pruning on the selection half, and modelling them
# ended ahead of it; on the built-in trainer (one conditional parameter of 7) the two tied. With
# objective.constraints the GP does not model feasibility and Optuna's TPE does: TPE
# univariate with successive halving's rungs and the Wilcoxon test. Several objectives:
# NSGA-II, no pruning. Arguments written without a kind go over these.
DEFAULTS: dict[Shape, tuple[SamplerSpec, PrunerSpec]] = {
    "one objective": (SamplerSpec("mf_gp", {}), PrunerSpec("wilcoxon", {})),
    "short curves": (SamplerSpec("mf_gp", {}), PrunerSpec("none", {})),
    "constrained": (
        SamplerSpec("tpe", {"multivariate": False, "consider_endpoints": True}),
        PrunerSpec("wilcoxon_halving", {}),
    ),
    "several objectives": (SamplerSpec("nsga2", {}), PrunerSpec("none", {})),
}


def shape_of(
    *, multi_objective: bool = False, constrained: bool = False, epochs: int | None = None
) -> Shape:
    """Which row of :data:`DEFAULTS` a study takes: several objectives win over constraints, and
    constraints over the curve's length (``epochs``: the file's ``trainer.config.epochs``, None
    when it does not say)."""
    if multi_objective:
        return "several objectives"
    if constrained:
        return "constrained"
    if epochs is not None and epochs <= SHORT_CURVE_EPOCHS:
        return "short curves"
    return "one objective"


def default_algorithms(
    *, multi_objective: bool = False, constrained: bool = False, epochs: int | None = None
) -> tuple[SamplerSpec, PrunerSpec]:
    """The sampler and pruner of a study file that names neither (:data:`DEFAULTS`)."""
    return DEFAULTS[
        shape_of(multi_objective=multi_objective, constrained=constrained, epochs=epochs)
    ]


def _spec_text(spec: SamplerSpec | PrunerSpec) -> str:
    if not spec.kwargs:
        return f"`{spec.kind}`"
    args = ", ".join(
        f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in spec.kwargs.items()
    )
    return f"`{{kind: {spec.kind}, {args}}}`"


_SHAPE_WORDS: dict[Shape, str] = {
    "short curves": f"a trial of at most {SHORT_CURVE_EPOCHS} epochs (`trainer.config.epochs`)",
    "constrained": "with `objective.constraints`",
    "several objectives": "several objectives",
}


def default_text(role: Literal["sampler", "pruner"]) -> str:
    """The defaults of ``role`` as the reference shows them: "`mf_gp` (with
    `objective.constraints`: `{kind: tpe, ...}`; several objectives: `nsga2`)"."""
    at = 0 if role == "sampler" else 1
    first = _spec_text(DEFAULTS["one objective"][at])
    others = "; ".join(
        f"{words}: {_spec_text(DEFAULTS[shape][at])}" for shape, words in _SHAPE_WORDS.items()
    )
    return f"{first} ({others})"


def accepts_text(role: Literal["sampler", "pruner"]) -> str:
    """What a study file may write for ``role``, every kind named, as the reference says it."""
    rows = SAMPLERS if role == "sampler" else PRUNERS
    kinds = ", ".join(
        f"`{k.name}`: {k.reference}" if k.reference else f"`{k.name}`" for k in rows.values()
    )
    tail = " or `{kind: ..., <argument>: ...}`"
    if role == "pruner":
        tail = ", `{kind: ..., <argument>: ...}` or null"
    return f"a kind ({kinds}){tail}"


def kinds_for_several_objectives() -> list[str]:
    """The samplers a study with several objectives may use, its default first."""
    default = DEFAULTS["several objectives"][0].kind
    return [default] + [
        k for k, row in SAMPLERS.items() if row.objectives != "one" and k != default
    ]


def class_loader(role: Literal["sampler", "pruner"], kind: str) -> Callable[[], type]:
    """The loader of ``kind``'s class (``KeyError`` for an unknown kind)."""
    return (SAMPLERS if role == "sampler" else PRUNERS)[kind].load
