"""Each behaviour of Optuna's private API that dvt-hpo relies on, on the installed Optuna: a
release that renames or changes one fails here, not deep inside a study."""

from __future__ import annotations

import datetime
import inspect
from pathlib import Path

import optuna
import pytest
import sqlalchemy

from dvt_hpo.optuna_api import private

optuna.logging.set_verbosity(optuna.logging.WARNING)
pytestmark = pytest.mark.filterwarnings(
    "ignore::optuna.exceptions.ExperimentalWarning",  # heartbeat_interval
    "ignore:Heartbeat of storage:UserWarning",  # ask() on a storage with heartbeats
    "ignore:`constraints_func`:FutureWarning",  # deprecated in Optuna 5, still what we use
)


@pytest.fixture
def rdb_study(storage_url: str, unique_name: str) -> optuna.Study:
    """A study on a SQLite file and on the real PostgreSQL server (skipped when none answers)."""
    storage = optuna.storages.RDBStorage(storage_url, heartbeat_interval=60)
    return optuna.create_study(storage=storage, study_name=unique_name)


def test_trial_ids_are_the_storages_for_live_and_frozen_trials(rdb_study: optuna.Study) -> None:
    rdb_study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    live = rdb_study.ask()
    storage = private.storage_of(rdb_study)
    for trial in [live, *rdb_study.get_trials(deepcopy=False)]:
        trial_id = private.trial_id_of(trial)
        assert isinstance(trial_id, int)
        assert storage.get_trial(trial_id).number == trial.number
        assert (
            storage.get_trial_id_from_study_id_trial_number(
                private.study_id_of(rdb_study), trial.number
            )
            == trial_id
        )


def test_a_trial_as_ask_read_it_is_what_the_storage_holds_then(rdb_study: optuna.Study) -> None:
    rdb_study.enqueue_trial({"x": 0.25}, user_attrs={"u": 1})
    storage = private.storage_of(rdb_study)
    trial = rdb_study.ask()
    frozen = private.frozen_at_ask(trial)
    stored = storage.get_trial(private.trial_id_of(trial))
    assert isinstance(frozen, optuna.trial.FrozenTrial)
    assert (frozen.number, frozen.state) == (trial.number, optuna.trial.TrialState.RUNNING)
    assert frozen.system_attrs == stored.system_attrs
    assert frozen.system_attrs["fixed_params"] == {"x": 0.25}  # what a queued copy carries
    assert frozen.user_attrs == stored.user_attrs == {"u": 1}
    assert private.trial_id_of(frozen) == private.trial_id_of(trial)


def test_the_study_id_and_storage_are_the_ones_its_name_resolves_to(
    rdb_study: optuna.Study,
) -> None:
    storage = private.storage_of(rdb_study)
    assert isinstance(storage, optuna.storages.BaseStorage)
    study_id = private.study_id_of(rdb_study)
    assert storage.get_study_id_from_name(rdb_study.study_name) == study_id
    storage.set_study_system_attr(study_id, "dvt_hpo:x", 7)
    assert storage.get_study_system_attrs(study_id)["dvt_hpo:x"] == 7


def test_uncached_unwraps_the_trial_cache_of_rdb_storages_only(rdb_study: optuna.Study) -> None:
    cached = private.storage_of(rdb_study)
    backend = private.uncached(cached)
    assert backend is not cached  # Optuna wraps RDB storages in its trial cache
    assert isinstance(backend, optuna.storages.RDBStorage)
    assert isinstance(backend.engine, sqlalchemy.engine.Engine)
    memory = optuna.create_study()
    assert private.uncached(private.storage_of(memory)) is private.storage_of(memory)


def test_the_heartbeat_model_holds_each_trials_last_heartbeat(rdb_study: optuna.Study) -> None:
    trial = rdb_study.ask()
    storage = private.uncached(private.storage_of(rdb_study))
    storage.record_heartbeat(private.trial_id_of(trial))
    model = private.heartbeat_model()
    trial_id = private.trial_id_of(trial)
    query = sqlalchemy.select(model.trial_id, model.heartbeat).where(model.trial_id == trial_id)
    with storage.engine.connect() as conn:
        rows = conn.execute(query).all()  # one row per trial: its last heartbeat
    assert [row[0] for row in rows] == [trial_id]
    assert isinstance(rows[0][1], datetime.datetime)


def test_constrained_samplers_store_constraints_under_the_key() -> None:
    study = optuna.create_study(
        sampler=optuna.samplers.NSGAIISampler(constraints_func=lambda t: (0.5, -1.0), seed=0)
    )
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    assert study.trials[0].system_attrs[private.CONSTRAINTS_KEY] == (0.5, -1.0)


def test_single_objective_samplers_are_the_ones_that_refuse_two_objectives() -> None:
    for cls in (optuna.samplers.TPESampler, optuna.samplers.NSGAIISampler):
        assert not private.single_objective_only(cls)
        optuna.create_study(directions=["minimize", "maximize"], sampler=cls(seed=0)).optimize(
            lambda t: (t.suggest_float("x", 0, 1), 0.0), n_trials=1
        )
    pytest.importorskip("cmaes")
    cma = optuna.samplers.CmaEsSampler
    assert private.single_objective_only(cma)
    study = optuna.create_study(directions=["minimize", "maximize"], sampler=cma(seed=0))
    with pytest.raises(ValueError):
        study.optimize(lambda t: (t.suggest_float("x", 0, 1), 0.0), n_trials=1)
    assert "_raise_error_if_multi_objective" in inspect.getsource(cma)


ATTRS = {"status": "done", "history": [[0, 0.5], [1, 0.25]], "exit": 0, "final": {"loss": 0.1}}


def _commits(engine: sqlalchemy.engine.Engine) -> list[int]:
    commits: list[int] = []
    sqlalchemy.event.listen(engine, "commit", lambda conn: commits.append(1))
    return commits


@pytest.mark.parametrize("system", [False, True])
def test_a_trials_attrs_are_written_in_one_transaction(
    rdb_study: optuna.Study, system: bool
) -> None:
    trial = rdb_study.ask()
    storage = private.storage_of(rdb_study)
    engine = private.uncached(storage).engine
    commits = _commits(engine)
    statements: list[str] = []
    sqlalchemy.event.listen(
        engine, "before_cursor_execute", lambda *args: statements.append(args[2].split()[0])
    )
    write = private.set_trial_system_attrs if system else private.set_trial_user_attrs
    write(storage, private.trial_id_of(trial), ATTRS)
    assert len(commits) == 1
    assert statements == ["SELECT", "INSERT"]  # the trial's state once, every row at once
    stored = storage.get_trial(private.trial_id_of(trial))
    assert {k: (stored.system_attrs if system else stored.user_attrs)[k] for k in ATTRS} == ATTRS


@pytest.mark.parametrize("system", [False, True])
def test_one_transaction_stores_what_one_call_per_attr_stores(
    rdb_study: optuna.Study, system: bool
) -> None:
    storage = private.storage_of(rdb_study)
    one, each = rdb_study.ask(), rdb_study.ask()
    for trial in (one, each):  # an attr written before is replaced, as Optuna's upsert does
        storage.set_trial_user_attr(private.trial_id_of(trial), "status", "running")
        storage.set_trial_system_attr(private.trial_id_of(trial), "status", "running")
    write = private.set_trial_system_attrs if system else private.set_trial_user_attrs
    write(storage, private.trial_id_of(one), ATTRS)
    per_attr = storage.set_trial_system_attr if system else storage.set_trial_user_attr
    for key, value in ATTRS.items():
        per_attr(private.trial_id_of(each), key, value)
    stored = [storage.get_trial(private.trial_id_of(t)) for t in (one, each)]
    assert stored[0].user_attrs == stored[1].user_attrs
    assert stored[0].system_attrs == stored[1].system_attrs
    assert (stored[0].system_attrs if system else stored[0].user_attrs)["status"] == "done"


def test_attrs_of_a_finished_trial_raise_and_write_nothing(rdb_study: optuna.Study) -> None:
    trial = rdb_study.ask()
    rdb_study.tell(trial, 1.0)
    storage = private.storage_of(rdb_study)
    for write in (private.set_trial_user_attrs, private.set_trial_system_attrs):
        with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
            write(storage, private.trial_id_of(trial), ATTRS)
    stored = private.uncached(storage).get_trial(private.trial_id_of(trial))
    assert not set(ATTRS) & (set(stored.user_attrs) | set(stored.system_attrs))


@pytest.mark.parametrize("kind", ["journal", "memory"])
def test_other_storages_get_one_call_per_attr(tmp_path: Path, kind: str) -> None:
    if kind == "journal":
        backend = optuna.storages.journal.JournalFileBackend(str(tmp_path / "j.log"))
        study = optuna.create_study(storage=optuna.storages.JournalStorage(backend))
    else:
        study = optuna.create_study()
    storage = private.storage_of(study)
    trial = study.ask()
    private.set_trial_user_attrs(storage, private.trial_id_of(trial), ATTRS)
    private.set_trial_system_attrs(storage, private.trial_id_of(trial), {"x": 1})
    stored = storage.get_trial(private.trial_id_of(trial))
    assert stored.user_attrs == ATTRS
    assert stored.system_attrs["x"] == 1
    study.tell(trial, 1.0)
    with pytest.raises(optuna.exceptions.UpdateFinishedTrialError):
        private.set_trial_user_attrs(storage, private.trial_id_of(trial), {"late": 1})
