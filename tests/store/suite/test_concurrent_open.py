"""N processes open a fresh database and create-or-load the same study at the same instant."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import optuna
import pytest

from dvt_hpo.store.opening import StudyAt
from tests.store.suite.gated import run_rounds

TRIALS_EACH = 2
ROUNDS = 5


@pytest.mark.processes
@pytest.mark.parametrize("workers", [4, 8])
def test_simultaneous_create_or_load_on_a_fresh_database(
    workers: int, fresh_storage_url: Callable[[], str], tmp_path: Path
) -> None:
    urls = [fresh_storage_url() for _ in range(ROUNDS)]
    for url, lines in zip(
        urls, run_rounds(workers, "race", TRIALS_EACH, urls, tmp_path), strict=True
    ):
        assert lines == ["done 0"] * workers, f"{url}: {lines}"
        study = StudyAt(url, "race").load().study
        assert len(optuna.get_all_study_names(study._storage)) == 1
        assert len(study.trials) == workers * TRIALS_EACH
        assert study.user_attrs == {"dvt_hpo:settings": {"sampler": "random"}}
