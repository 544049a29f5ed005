"""The registry of sampler and pruner kinds: every kind reaches every place that knows kinds
(the factory, the loader and ``validate``, the start line, the generated reference, the trial
lines), and the defaults are one table every text is made from."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dvt_hpo.exceptions import SpecError
from dvt_hpo.results.outcome import pruned_reason
from dvt_hpo.sampling import kinds
from dvt_hpo.sampling.kinds import DEFAULTS, PRUNERS, SAMPLERS, default_algorithms, shape_of
from dvt_hpo.sampling.optuna_factory import build_sampler, pruner_class, sampler_class
from dvt_hpo.spec.model import PrunerSpec, SamplerSpec, StudySection
from dvt_hpo.study.messages import algorithms_text
from dvt_hpo.studyfile import load_spec
from dvt_hpo.studyfile.reference import rows
from tests.conftest import toy_study

ALL = [("sampler", k) for k in SAMPLERS] + [("pruner", k) for k in PRUNERS]


@pytest.mark.parametrize(("role", "kind"), ALL, ids=[f"{r}-{k}" for r, k in ALL])
def test_every_kind_has_its_whole_row_and_its_class(role: str, kind: str) -> None:
    row = (SAMPLERS if role == "sampler" else PRUNERS)[kind]
    assert row.name == kind and row.display and row.class_name
    cls = sampler_class(kind) if role == "sampler" else pruner_class(kind)
    assert cls.__name__ == row.class_name
    assert row.objectives in ("one", "several", "any")


@pytest.mark.parametrize(("role", "kind"), ALL, ids=[f"{r}-{k}" for r, k in ALL])
def test_the_start_line_names_every_kind(role: str, kind: str) -> None:
    sampler = SamplerSpec(kind) if role == "sampler" else SamplerSpec("random")
    pruner = PrunerSpec(kind) if role == "pruner" else PrunerSpec("none")
    line = algorithms_text(StudySection(name="x", sampler=sampler, pruner=pruner))
    row = (SAMPLERS if role == "sampler" else PRUNERS)[kind]
    assert f"{role} {row.display}" in line


def test_the_generated_reference_names_every_kind_and_the_defaults() -> None:
    shown = {r.path: r for r in rows(StudySection, "study")}
    for role, table in (("sampler", SAMPLERS), ("pruner", PRUNERS)):
        row = shown[f"study.{role}"]
        for kind in table:
            assert f"`{kind}`" in row.allowed, (role, kind)
        for sampler, pruner in DEFAULTS.values():
            spec = sampler if role == "sampler" else pruner
            assert f"kind: {spec.kind}" in row.default or f"`{spec.kind}`" in row.default


@pytest.mark.parametrize("role", ["sampler", "pruner"])
def test_validate_lists_every_kind(
    role: str, write_study: Callable[..., Path], unique_name: str
) -> None:
    with pytest.raises(SpecError) as bad:
        load_spec(write_study(toy_study(unique_name, study={role: "no_such_kind"})))
    for kind in SAMPLERS if role == "sampler" else PRUNERS:
        assert kind in str(bad.value), kind


def test_every_pruner_names_its_class_in_the_trial_lines() -> None:
    for kind, row in PRUNERS.items():
        assert pruned_reason(3, kind) == f"pruned at step 3 by {row.class_name}"


def test_the_seed_rule_is_the_rows() -> None:
    offset = build_sampler(SamplerSpec("random", {"seed": 1}), (), seed_offset=5)
    fresh = build_sampler(SamplerSpec("random", {"seed": 6}), ())
    assert offset._rng.rng.random() == fresh._rng.rng.random()  # seed 1 + 5
    assert SAMPLERS["random"].offset_seed and not SAMPLERS["qmc"].offset_seed
    assert not SAMPLERS["grid"].offset_seed


def test_the_parallel_rule_is_the_rows() -> None:
    """TPE's constant liar under parallel trials: one column, read by the loader (written
    into the spec) and the factory (a spec built in code)."""
    tpe = SAMPLERS["tpe"]
    assert tpe.parallel_kwargs({"seed": 1}, 2) == {"seed": 1, "constant_liar": True}
    assert tpe.parallel_kwargs({"constant_liar": False}, 4) == {"constant_liar": False}
    assert tpe.parallel_kwargs({}, 1) == {}
    assert SAMPLERS["random"].parallel_kwargs({}, 4) == {}
    spec = SamplerSpec("tpe", {"constant_liar": False})
    assert not build_sampler(spec, (), parallel=2)._constant_liar  # the file's word holds
    assert build_sampler(SamplerSpec("tpe"), (), parallel=2)._constant_liar


def test_the_derived_arguments_are_the_rows() -> None:
    derived = {k: row.derived_arguments for k, row in PRUNERS.items() if row.derived}
    assert derived == {
        "hyperband": ("max_resource",),
        "wilcoxon": ("max_resource",),
        "wilcoxon_halving": ("max_resource",),
        "gp_chance": ("max_resource",),
        "mo_asha": ("min_resource", "max_resource"),
    }


def test_the_defaults_are_one_table_by_shape() -> None:
    assert set(DEFAULTS) == {"one objective", "short curves", "constrained", "several objectives"}
    for sampler, pruner in DEFAULTS.values():
        assert sampler.kind in SAMPLERS and pruner.kind in PRUNERS
    for multi in (False, True):
        for constrained in (False, True):
            shape = shape_of(multi_objective=multi, constrained=constrained)
            got = default_algorithms(multi_objective=multi, constrained=constrained)
            assert got == DEFAULTS[shape]
    several = DEFAULTS["several objectives"]
    assert SAMPLERS[several[0].kind].objectives != "one"
    assert PRUNERS[several[1].kind].objectives != "one"
    assert kinds.kinds_for_several_objectives()[0] == several[0].kind


def test_the_measured_defaults() -> None:
    """The choice itself (benchmarks/search/, its selection half): changed with DEFAULTS only."""
    assert DEFAULTS["one objective"] == (SamplerSpec("mf_gp", {}), PrunerSpec("wilcoxon", {}))
    # Short curves: the GP without pruning, best on the suite's 10-step families.
    assert DEFAULTS["short curves"] == (SamplerSpec("mf_gp", {}), PrunerSpec("none", {}))
    # The GP does not read constraints: a constrained study keeps TPE and the rungs.
    assert DEFAULTS["constrained"] == (
        SamplerSpec("tpe", {"multivariate": False, "consider_endpoints": True}),
        PrunerSpec("wilcoxon_halving", {}),
    )
    assert DEFAULTS["several objectives"] == (SamplerSpec("nsga2"), PrunerSpec("none"))


def test_the_default_follows_the_curves_length() -> None:
    long = kinds.SHORT_CURVE_EPOCHS + 1
    # A file that does not say how many epochs keeps the GP too.
    for epochs in (long, None):
        assert kinds.default_algorithms(epochs=epochs) == DEFAULTS["one objective"]
    for epochs in (1, kinds.SHORT_CURVE_EPOCHS):
        assert kinds.default_algorithms(epochs=epochs) == DEFAULTS["short curves"]
    # Constraints and several objectives decide before the curve's length.
    assert kinds.default_algorithms(epochs=long, constrained=True) == DEFAULTS["constrained"]
    assert kinds.default_algorithms(epochs=1, multi_objective=True)[0].kind == "nsga2"
    assert "at most 20 epochs" in kinds.default_text("sampler")


def test_the_texts_naming_the_defaults_come_from_the_table() -> None:
    assert kinds.default_text("sampler").startswith(
        f"`{DEFAULTS['one objective'][0].kind}` (a trial of at most "
    )
    assert kinds.accepts_text("pruner").endswith(", `{kind: ..., <argument>: ...}` or null")
    assert "`mo_asha`: several objectives" in kinds.accepts_text("pruner")
