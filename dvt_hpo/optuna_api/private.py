"""Every use of Optuna's private API, in one place (dvt-hpo supports Optuna 4.9 and 5).

Each function reads one private name that no public API replaces, and says why it is needed;
``tests/optuna_api/test_private.py`` checks each behaviour relied on against the installed
Optuna, so a release that changes one fails there first. Nothing else in dvt-hpo names an
underscored attribute or module of Optuna (``tests/test_architecture.py`` keeps it so).
"""

from __future__ import annotations

import inspect
import json
import sqlite3
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna


def trial_id_of(trial: optuna.trial.Trial | optuna.trial.FrozenTrial) -> int:
    """The storage's id of a trial (``Trial._trial_id``, ``FrozenTrial._trial_id``): every
    storage call (``get_trial``, ``set_trial_*``, ``record_heartbeat``) takes it, and Optuna
    exposes it only to its own code."""
    return trial._trial_id


def frozen_at_ask(trial: optuna.trial.Trial) -> optuna.trial.FrozenTrial:
    """The trial as ``study.ask`` read it back (``Trial._cached_frozen_trial``: its number,
    RUNNING, the system attrs an enqueued copy carries): reading it again cost every launch a
    query. Suggestions made since are in it too; what other calls wrote since is not."""
    return trial._cached_frozen_trial


def storage_of(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The storage a study writes through (``Study._storage``; on RDB storages Optuna's trial
    cache wraps it): for study-level system attributes, which ``Study`` only reads through a
    deprecated property, and for writes on a trial by id."""
    return study._storage


def study_id_of(study: optuna.Study) -> int:
    """The storage's id of a study (``Study._study_id``): what the storage's study calls take."""
    return study._study_id


def uncached(storage: Any) -> Any:
    """``storage`` without Optuna's per-study trial cache (``_CachedStorage._backend``), which
    wraps RDB storages and loads every trial on first use: for our own SQL reads and
    heartbeats. Any other storage is returned as it is."""
    from optuna.storages._cached_storage import _CachedStorage

    return storage._backend if isinstance(storage, _CachedStorage) else storage


def set_trial_user_attrs(storage: Any, trial_id: int, attrs: Mapping[str, Any]) -> None:
    """Write several user attributes of one trial, in one transaction on an RDB storage."""
    _set_trial_attrs(storage, trial_id, attrs, system=False)


def set_trial_system_attrs(storage: Any, trial_id: int, attrs: Mapping[str, Any]) -> None:
    """Write several system attributes of one trial, in one transaction on an RDB storage."""
    _set_trial_attrs(storage, trial_id, attrs, system=True)


def _set_trial_attrs(
    storage: Any, trial_id: int, attrs: Mapping[str, Any], *, system: bool
) -> None:
    """Optuna's storages write one attribute per transaction (on SQLite each commit synced the
    log: a trial's record of a dozen attributes was a dozen syncs), and each write reads the
    trial again to check that it still runs. On an RDBStorage (``_CachedStorage`` only forwards
    these writes to it) a batch is one transaction: on SQLite and PostgreSQL one check of the
    trial's state (``models.TrialModel.find_or_raise_by_id`` and
    ``RDBStorage.check_trial_is_updatable``, as Optuna's ``_set_trial_attr_without_commit``
    does) and one upsert of every row, in Optuna's own statement and JSON; on other databases
    Optuna's ``_set_trial_attr_without_commit`` per attribute. All or none, and a finished
    trial raises ``UpdateFinishedTrialError`` as one call per attribute does. Any other storage
    (journal, in-memory) gets one call per attribute."""
    import optuna

    if not attrs:
        return
    backend = uncached(storage)
    if not isinstance(backend, optuna.storages.RDBStorage):
        write = storage.set_trial_system_attr if system else storage.set_trial_user_attr
        for key, value in attrs.items():
            write(trial_id, key, value)
        return
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    model = models.TrialSystemAttributeModel if system else models.TrialUserAttributeModel
    insert = _upsert_dialect(backend.engine.name)
    # ignore_integrity_error as Optuna's own set_trial_*_attr: a concurrent insert of the same
    # key by another process is not an error.
    with _create_scoped_session(backend.scoped_session, True) as session:
        if insert is None:
            for key, value in attrs.items():
                backend._set_trial_attr_without_commit(session, model, trial_id, key, value)
            return
        trial = models.TrialModel.find_or_raise_by_id(trial_id, session)
        backend.check_trial_is_updatable(trial_id, trial.state)
        rows = [
            {"trial_id": trial_id, "key": key, "value_json": json.dumps(value)}
            for key, value in attrs.items()
        ]
        statement = insert(model).values(rows)
        session.execute(
            statement.on_conflict_do_update(
                index_elements=[model.trial_id, model.key],
                set_={"value_json": statement.excluded.value_json},
            )
        )


def _upsert_dialect(engine_name: str) -> Any:
    """The ``insert`` whose ``on_conflict_do_update`` Optuna uses on this database, or None
    where it writes otherwise (MySQL, SQLite before 3.24)."""
    if engine_name == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert
    if engine_name == "sqlite" and sqlite3.sqlite_version_info >= (3, 24, 0):
        from sqlalchemy.dialects import sqlite

        return sqlite.insert
    return None


def heartbeat_model() -> Any:
    """The SQLAlchemy model of the trial heartbeats table (``optuna.storages._rdb.models``):
    Optuna has no public reader of a trial's last heartbeat."""
    from optuna.storages._rdb import models

    return models.TrialHeartbeatModel


def _constraints_key() -> str:
    """Optuna's attr name (its module moved between releases; the name never changed)."""
    for module in ("optuna.study._constrained_optimization", "optuna.samplers._base"):
        try:
            imported = __import__(module, fromlist=["_CONSTRAINTS_KEY"])
        except ImportError:  # pragma: no cover - depends on the Optuna release
            continue
        key = getattr(imported, "_CONSTRAINTS_KEY", None)
        if isinstance(key, str):
            return key
    return "constraints"  # pragma: no cover


# The trial system attribute under which Optuna's constrained samplers store a trial's
# constraint values (``_CONSTRAINTS_KEY``): dvt-hpo stores them there before the tell.
CONSTRAINTS_KEY = _constraints_key()


def single_objective_only(sampler_class: type) -> bool:
    """Whether a sampler class refuses a study of several objectives: Optuna's single-objective
    samplers call its private ``_raise_error_if_multi_objective``; reading the source follows
    new releases without a list to maintain. Raises ``OSError``/``TypeError`` when the source
    cannot be read."""
    return "_raise_error_if_multi_objective" in inspect.getsource(sampler_class)


__all__ = [
    "CONSTRAINTS_KEY",
    "frozen_at_ask",
    "heartbeat_model",
    "set_trial_system_attrs",
    "set_trial_user_attrs",
    "single_objective_only",
    "storage_of",
    "study_id_of",
    "trial_id_of",
    "uncached",
]
