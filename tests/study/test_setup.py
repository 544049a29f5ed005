"""Opening a study for a run, as a run sees it: a fresh study is created with the file's
settings, start and seeds; an existing one is loaded as it is, refused when its objective
changed, and told of a search-space change only when it is allowed. No trial is run here."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest

from dvt_hpo.budget.compute import STARTED_ATTR
from dvt_hpo.exceptions import SpecError, StudyStopped
from dvt_hpo.optuna_api.private import study_id_of
from dvt_hpo.spec.model import StudySpec
from dvt_hpo.store import compat
from dvt_hpo.study.setup import (
    check_runs_dir,
    open_checked,
    open_for_run,
    reseeded_sampler,
    runs_dir_problem,
    study_settings,
)
from dvt_hpo.studyfile import load_spec
from tests.conftest import toy_study

SEEDS = [{"x": 0.125}, {"x": 0.75}]


@pytest.fixture
def spec_of(write_study: Callable[..., Path]) -> Callable[..., StudySpec]:
    """The spec of a toy study (on a SQLite file beside it), with ``sections`` merged in."""

    def make(**sections: Any) -> StudySpec:
        return load_spec(write_study(toy_study("setup", **sections)))

    return make


def _open(spec: StudySpec, *, allow_space_change: bool = False) -> tuple[Any, list[str]]:
    lines: list[str] = []
    opened = open_for_run(spec, allow_space_change=allow_space_change, out=lines.append)
    return (opened.study, opened.storage, opened.study_id), lines


def test_a_fresh_study_is_created_with_the_files_settings_its_start_and_its_seeds(
    spec_of: Callable[..., StudySpec],
) -> None:
    spec = spec_of(study={"enqueue": SEEDS})
    (study, storage, study_id), lines = _open(spec)
    assert study.study_name == "setup" and study_id == study_id_of(study)
    assert study.directions == [optuna.study.StudyDirection.MAXIMIZE]
    assert isinstance(study.sampler, optuna.samplers.RandomSampler)
    assert isinstance(study.pruner, optuna.pruners.NopPruner)
    stored = {k[len(compat.ATTR_PREFIX) :]: v for k, v in study.user_attrs.items()}
    assert study_settings(spec).items() <= stored.items()
    assert STARTED_ATTR in storage.get_study_system_attrs(study_id)
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert [t.system_attrs["fixed_params"] for t in waiting] == SEEDS
    assert any(line.startswith("seeded: 2 from study.enqueue") for line in lines), lines


def test_an_existing_study_is_loaded_as_it_is(spec_of: Callable[..., StudySpec]) -> None:
    spec = spec_of(study={"enqueue": SEEDS})
    (first, storage, study_id), _ = _open(spec)
    started = storage.get_study_system_attrs(study_id)[STARTED_ATTR]
    (again, storage, same_id), lines = _open(spec)
    assert same_id == study_id
    assert len(again.trials) == len(SEEDS)  # seeded once per study, not per run
    assert storage.get_study_system_attrs(study_id)[STARTED_ATTR] == started
    assert not any("study.enqueue" in line for line in lines), lines


def test_an_existing_study_refuses_another_objective(spec_of: Callable[..., StudySpec]) -> None:
    _open(spec_of())
    other = spec_of(objective={"metric": "score", "direction": "minimize"})
    with pytest.raises(SpecError, match="differs from the study 'setup'") as refused:
        _open(other)
    assert refused.value.field is not None and refused.value.field.startswith("objective")


def test_a_changed_search_space_is_refused_unless_allowed_then_said(
    spec_of: Callable[..., StudySpec],
) -> None:
    _open(spec_of())
    wider = [{"name": "x", "path": "x", "kind": "float", "low": 0.0, "high": 2.0, "new_key": True}]
    with pytest.raises(SpecError, match="--allow-space-change"):
        _open(spec_of(search_space=wider))
    _, lines = _open(spec_of(search_space=wider), allow_space_change=True)
    assert any(line.startswith("search space changed: ") for line in lines), lines


def test_the_reseeded_sampler_draws_by_the_workers_first_trial(
    spec_of: Callable[..., StudySpec],
) -> None:
    spec = spec_of()

    def draws(first_number: int) -> list[float]:
        study = optuna.create_study(sampler=reseeded_sampler(spec, first_number))
        return [study.ask().suggest_float("x", 0.0, 1.0) for _ in range(3)]

    assert draws(4) == draws(4)  # reproducible for one worker
    assert draws(4) != draws(5)  # two workers do not draw alike


def test_runs_dir_problems_are_found_without_creating_anything(tmp_path: Path) -> None:
    assert runs_dir_problem(tmp_path) is None
    assert runs_dir_problem(tmp_path / "a" / "b") is None
    assert not (tmp_path / "a").exists()
    file = tmp_path / "file"
    file.write_text("")
    assert runs_dir_problem(file) == f"{str(file)!r} is not a folder"
    assert (
        runs_dir_problem(file / "runs")
        == f"{str(file)!r} is a file, so {str(file / 'runs')!r} cannot be created"
    )
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert "is not writable by this user" in str(runs_dir_problem(locked / "runs"))


def test_an_unusable_runs_dir_is_a_spec_error_naming_the_field(
    spec_of: Callable[..., StudySpec], tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("")
    spec = spec_of(trials={"runs_dir": str(tmp_path / "file" / "runs")})
    with pytest.raises(SpecError, match="trials.runs_dir must be a folder") as refused:
        check_runs_dir(spec)
    assert refused.value.field == "trials.runs_dir"


def test_a_run_opens_its_study_after_checking_its_runs_dir(
    spec_of: Callable[..., StudySpec], tmp_path: Path
) -> None:
    spec = spec_of()
    assert open_checked(spec, allow_space_change=False, out=print).study.study_name == "setup"
    (tmp_path / "file").write_text("")
    bad = spec_of(trials={"runs_dir": str(tmp_path / "file" / "runs")})
    with pytest.raises(SpecError, match="trials.runs_dir"):
        open_checked(bad, allow_space_change=False, out=print)


def test_a_storage_that_cannot_be_opened_is_one_line(
    spec_of: Callable[..., StudySpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk gone\nmore detail")

    monkeypatch.setattr("dvt_hpo.study.setup.open_for_run", refused)
    spec = spec_of(study={"storage": "sqlite:///x.db?secret=1"})
    with pytest.raises(StudyStopped) as stopped:
        open_checked(spec, allow_space_change=False, out=print)
    assert str(stopped.value).startswith("cannot open study.storage ")
    assert str(stopped.value).endswith(": OSError: disk gone")
