"""The suite's cells: ``sampler+pruner`` as a study file writes them (``seed`` added per study),
or ``default``: the study file names neither, so the cell is what dvt-hpo picks for that study.
A third part ``+pause`` sets ``trials.pause: true`` (a trial the pruner stops before its last
epoch is paused and may be continued: ``dvt_hpo.recovery.pause``); it needs a pruner."""

from __future__ import annotations

from typing import Any

_TPE_UNI_CE: dict[str, Any] = {"kind": "tpe", "multivariate": False, "consider_endpoints": True}
SAMPLERS: dict[str, dict[str, Any]] = {
    "random": {"kind": "random"},
    # Optuna's TPE as dvt-hpo builds it when named without settings (multivariate under Optuna 5).
    "tpe": {"kind": "tpe"},
    "tpe-uni-ce": dict(_TPE_UNI_CE),
    # A GP over (config, epoch) fitted on every trial's curve (dvt_hpo.sampling.mf_gp).
    "mf-gp": {"kind": "mf_gp"},
    # The same GP deciding after fewer random trials than its 10 (round 9's screen of the
    # short-curve row; one more than the parameters it models: 3 on iaml_glmnet, 6 on
    # rbv2_rpart, 7 on builtin_digits, 8 on LCBench).
    "mf-gp-s3": {"kind": "mf_gp", "n_startup_trials": 3},
    "mf-gp-s5": {"kind": "mf_gp", "n_startup_trials": 5},
    "mf-gp-s6": {"kind": "mf_gp", "n_startup_trials": 6},
    "mf-gp-s7": {"kind": "mf_gp", "n_startup_trials": 7},
    "mf-gp-s8": {"kind": "mf_gp", "n_startup_trials": 8},
    # The GP with every conditional parameter left to univariate TPE (before round 10, where a
    # parameter a categorical's choice decides is modelled).
    "mf-gp-tpecond": {"kind": "mf_gp", "model_conditional": False},
    "mf-gp-cond": {"kind": "mf_gp", "model_conditional": True},
}
PRUNERS: dict[str, dict[str, Any]] = {
    "none": {"kind": "none"},
    # The GP's own chance that a trial ends best (round 12), stopped under 1, 5 or 10 %, deciding
    # from the 3rd, 5th, 6th or 10th finished trial (10: after the GP's random start).
    **{
        f"chance{pct:02d}-m{m}": {"kind": "gp_chance", "min_chance": pct / 100, "min_trials": m}
        for pct in (1, 5, 10)
        for m in (3, 5, 6, 10)
    },
    # Round 13: round 12's pick deciding from a trial's R-th report only (its first reports say
    # least of where a curve ends).
    **{
        f"chance01-m6-r{r}": {
            "kind": "gp_chance",
            "min_chance": 0.01,
            "min_trials": 6,
            "min_reports": r,
        }
        for r in (3, 4, 6)
    },
    "median": {"kind": "median"},
    "wilcoxon": {"kind": "wilcoxon"},
    "wilcoxon-halving": {"kind": "wilcoxon_halving"},
    # Optuna's successive halving is asynchronous (ASHA).
    "sha": {"kind": "successive_halving"},
    # max_resource: the trainer's epochs (dvt-hpo derives it from trainer.config.epochs).
    "hyperband": {"kind": "hyperband", "min_resource": 1},
}
DEFAULT = "default"
# The baselines every goal is stated against.
TPE_NONE, TPE_MEDIAN = "tpe+none", "tpe+median"
# The screen: the baselines, the default and its halves, the previous default, and the cells an
# outside check found ahead off LCBench.
SCREEN = (
    TPE_NONE,
    TPE_MEDIAN,
    DEFAULT,
    "mf-gp+wilcoxon",
    "mf-gp+none",
    "tpe+wilcoxon",
    "tpe-uni-ce+wilcoxon",
    "tpe-uni-ce+wilcoxon-halving",
    "tpe+sha",
    "tpe+hyperband",
    "random+sha",
)


PAUSE = "pause"
# trials.pause (round 8): each pause cell beside its stopping twin (the same sampler and pruner).
PAUSE_CELLS = (
    "tpe+sha+pause",
    "random+sha+pause",
    "tpe+wilcoxon-halving+pause",
    "mf-gp+wilcoxon+pause",
    "tpe+median+pause",
    "tpe+hyperband+pause",
)


def _parts(cell: str) -> tuple[str, str, bool]:
    """(sampler, pruner, paused) of a ``sampler+pruner[+pause]`` cell."""
    parts = cell.split("+")
    if len(parts) == 3 and parts[2] == PAUSE:
        return parts[0], parts[1], True
    if len(parts) == 2:
        return parts[0], parts[1], False
    return "", "", False


def twin(cell: str) -> str:
    """The stopping twin of a pause cell (the cell itself otherwise)."""
    sampler, pruner, paused = _parts(cell)
    return f"{sampler}+{pruner}" if paused else cell


# `--cells pause`: the pause cells, their twins (tpe+median among them), TPE without pruning and
# the default.
PAUSE_GROUP = (*PAUSE_CELLS, *(twin(c) for c in PAUSE_CELLS), TPE_NONE, DEFAULT)


def check_cell(cell: str) -> None:
    if cell == DEFAULT:
        return
    sampler, pruner, paused = _parts(cell)
    if sampler not in SAMPLERS or pruner not in PRUNERS:
        raise ValueError(
            f"unknown cell {cell!r}: sampler+pruner[+{PAUSE}] of {list(SAMPLERS)} x "
            f"{list(PRUNERS)}, or {DEFAULT!r}"
        )
    if paused and pruner == "none":
        raise ValueError(f"cell {cell!r}: +{PAUSE} pauses what a pruner stops; name one")


def algorithms(cell: str, seed: int) -> dict[str, Any]:
    """The study section's ``sampler`` and ``pruner`` of ``cell``."""
    if cell == DEFAULT:
        return {"sampler": {"seed": seed}}  # dvt-hpo's defaults, the sampler only seeded
    sampler, pruner, _ = _parts(cell)
    return {"sampler": {**SAMPLERS[sampler], "seed": seed}, "pruner": dict(PRUNERS[pruner])}


def trials_section(cell: str) -> dict[str, Any]:
    """What ``cell`` adds to the study file's ``trials`` section."""
    return {PAUSE: True} if cell != DEFAULT and _parts(cell)[2] else {}


def is_pause(cell: str) -> bool:
    return bool(trials_section(cell))
