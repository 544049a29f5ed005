"""The whole-study reads in SQL give what Optuna's own reads give, on every storage kind."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from dvt_hpo.store.opening import StudyAt
from dvt_hpo.store.queries import count_trials, state_counts, trial_marks
from dvt_hpo.store.storage import study_storage


@pytest.fixture(params=["sqlite", "journal", "postgresql"])
def study(request: pytest.FixtureRequest, tmp_path: Path) -> optuna.Study:
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_url")
        name = request.getfixturevalue("unique_name")
    else:
        suffix = "db" if request.param == "sqlite" else "log"
        url, name = f"{request.param}:///{tmp_path / f'q.{suffix}'}", "q"
    study = StudyAt(url, name).create_or_load(["maximize"]).study
    for i in range(5):
        trial = study.ask()
        if i == 1:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        elif i == 2:
            study._storage.set_trial_system_attr(trial._trial_id, "retry_history", [1])
            study._storage.set_trial_system_attr(trial._trial_id, "other", "x")
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        elif i < 4:
            study.tell(trial, float(i))
    study.enqueue_trial({})
    return study


def test_counts_and_marks_match_optunas_reads(study: optuna.Study) -> None:
    storage = study_storage(study)
    trials = study.get_trials(deepcopy=False)
    assert count_trials(storage, study._study_id) == len(trials) == 6
    counts = state_counts(storage, study._study_id)
    assert counts == {
        "RUNNING": 1,
        "WAITING": 1,
        "COMPLETE": 2,
        "PRUNED": 1,
        "FAIL": 1,
    }
    marks = trial_marks(storage, study._study_id, ["retry_history", "absent"])
    assert [(m.number, m.trial_id, m.state) for m in marks] == [
        (t.number, t._trial_id, t.state.name) for t in trials
    ]
    assert [m.system_attrs for m in marks] == [{}, {}, {"retry_history": [1]}, {}, {}, {}]


def test_a_postgresql_study_gets_the_trial_indexes_once(
    postgres_url: str, unique_name: str
) -> None:
    import sqlalchemy

    from dvt_hpo.store.queries import INDEXES, add_indexes

    study = StudyAt(postgres_url, unique_name).create_or_load(["maximize"]).study
    engine = sqlalchemy.create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            names = set(
                conn.execute(
                    sqlalchemy.text("SELECT indexname FROM pg_indexes WHERE tablename = 'trials'")
                ).scalars()
            )
        assert set(INDEXES) <= names
        add_indexes(study_storage(study))  # present: nothing to do, no error
    finally:
        engine.dispose()
