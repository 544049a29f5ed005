"""Opening an existing study for reading: what ran is read, a study that has not run yet is one
error and nothing is written, and the storage handed out is the database's own, uncached."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import optuna
import pytest

from dvt_hpo.exceptions import StudyNotFoundError
from dvt_hpo.store.reader import open_existing_storage, open_existing_study
from dvt_hpo.studyfile import load_spec
from tests.conftest import toy_study


def test_a_study_that_never_ran_is_one_error_and_nothing_is_written(
    write_study: Callable[..., Path], tmp_path: Path
) -> None:
    spec = load_spec(write_study(toy_study("unrun")))
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(StudyNotFoundError, match="unrun"):
        open_existing_study(spec)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no database file made


def test_a_stored_study_is_read_through_its_own_storage(
    write_study: Callable[..., Path],
) -> None:
    spec = load_spec(write_study(toy_study("ran")))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    made = optuna.create_study(study_name="ran", storage=spec.study.storage)
    made.enqueue_trial({"x": 0.25})
    study = open_existing_study(spec)
    assert [(t.state.name, t.system_attrs["fixed_params"]) for t in study.trials] == [
        ("WAITING", {"x": 0.25})
    ]
    storage, study_id = open_existing_storage(spec)
    assert isinstance(storage, optuna.storages.RDBStorage)  # not Optuna's trial cache
    assert storage.get_study_name_from_id(study_id) == "ran"
