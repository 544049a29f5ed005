"""The pruner settings Optuna would guess from the first trial, taken from the file's epochs
instead (the default sampler and pruner: tests/sampling/test_kinds.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import pytest

from dvt_hpo.sampling.kinds import PRUNERS, Derivation
from dvt_hpo.spec.model import PrunerSpec, StudySpec
from dvt_hpo.studyfile import load_spec
from dvt_hpo.studyfile.defaults import _DERIVE, derive_budget_settings, file_epochs
from tests.conftest import toy_study

EPOCHS_DIM = {"name": "epochs", "path": "epochs", "kind": "int", "low": 2, "high": 30}


@pytest.fixture
def spec(write_study: Callable[..., Path]) -> StudySpec:
    doc = toy_study("defaults")
    doc["search_space"].append(EPOCHS_DIM)
    return load_spec(write_study(doc))


def _pruner(
    spec: StudySpec, kind: str, config: dict[str, Any], *, dims: bool = False, **kwargs: object
) -> PrunerSpec:
    study = dataclasses.replace(spec.study, pruner=PrunerSpec(kind, dict(kwargs)))
    return derive_budget_settings(study, config, spec.search_space if dims else ()).pruner


def test_hyperbands_max_resource_is_the_trainers_epochs(spec: StudySpec) -> None:
    assert _pruner(spec, "hyperband", {"epochs": 20}).kwargs == {"max_resource": 20}
    # The top of an epochs dimension wins over the config's value.
    assert _pruner(spec, "hyperband", {"epochs": 20}, dims=True).kwargs == {"max_resource": 30}
    assert _pruner(spec, "hyperband", {"epochs": 20}, max_resource=7).kwargs == {"max_resource": 7}


@pytest.mark.parametrize("config", [{}, {"epochs": True}, {"epochs": 0}, {"epochs": "ten"}])
def test_without_a_number_of_epochs_hyperband_is_left_to_optuna(
    spec: StudySpec, config: dict[str, Any]
) -> None:
    assert _pruner(spec, "hyperband", config).kwargs == {}


def test_epochs_at_or_below_min_resource_are_left_for_optuna_to_refuse(spec: StudySpec) -> None:
    assert _pruner(spec, "hyperband", {"epochs": 3}, min_resource=3).kwargs == {"min_resource": 3}


def test_mo_ashas_rungs_from_a_tenth_of_the_epochs_to_below_the_last(spec: StudySpec) -> None:
    assert _pruner(spec, "mo_asha", {"epochs": 52}).kwargs == {
        "min_resource": 5,
        "max_resource": 51,
    }
    assert _pruner(spec, "mo_asha", {}).kwargs == {"min_resource": 1}
    assert _pruner(spec, "mo_asha", {"epochs": 52}, min_resource=2).kwargs == {
        "min_resource": 2,
        "max_resource": 51,
    }


def test_the_default_pruners_rungs_stop_below_the_last_epoch(spec: StudySpec) -> None:
    assert _pruner(spec, "wilcoxon_halving", {"epochs": 52}).kwargs == {"max_resource": 51}
    assert _pruner(spec, "wilcoxon_halving", {"epochs": 20}, dims=True).kwargs == {
        "max_resource": 29
    }
    assert _pruner(spec, "wilcoxon_halving", {"epochs": 1}).kwargs == {"max_resource": 1}
    assert _pruner(spec, "wilcoxon_halving", {"epochs": 52}, max_resource=40).kwargs == {
        "max_resource": 40
    }
    # Without a number of epochs: no limit.
    assert _pruner(spec, "wilcoxon_halving", {}, p_threshold=0.2).kwargs == {"p_threshold": 0.2}


def test_other_pruners_are_left_as_written(spec: StudySpec) -> None:
    assert _pruner(spec, "median", {"epochs": 20}, n_startup_trials=2).kwargs == {
        "n_startup_trials": 2
    }


def test_a_files_epochs_are_read_from_the_trainer_config() -> None:
    assert file_epochs({"trainer": {"config": {"epochs": 52}}}) == 52
    for root in ({}, {"trainer": {"config": {}}}, {"trainer": {"config": {"epochs": True}}}):
        assert file_epochs(root) is None


def test_every_rule_a_row_names_is_here() -> None:
    """The loader reads the pruner's row (kinds.Kind.derived) and has a rule for each name."""
    assert set(_DERIVE) == set(get_args(Derivation))
    named = {how for row in PRUNERS.values() for _, how in row.derived}
    assert named == set(_DERIVE)
