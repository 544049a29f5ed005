"""Reads of a whole study in SQL on RDB storages, where Optuna would load every trial.

Optuna's ``get_n_trials`` and ``get_all_trials`` build a full ``FrozenTrial`` (params, values,
every attribute and intermediate value) for each trial they count or return: on a PostgreSQL
study of 20,000 trials each such read took 10 to 15 s, and a worker joining it made four
(``benchmarks/overheads/long_study.py``). The counts and marks below are one or two indexed queries.
Journal storages have no SQL: there Optuna's own reads serve, on trials it holds in memory.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dvt_hpo.optuna_api.private import trial_id_of, uncached

# Optuna indexes trials by study alone, so its reads during a run (the trials since its last
# read, a trial by its number, the RUNNING trials whose heartbeat is stale) scan every trial of
# the study: on 20,000 trials that is most of what a trial's cost grows by. Added on PostgreSQL
# when a study is created; Optuna's migrations there alter columns in place and keep them. Not
# on SQLite, whose migrations copy tables.
INDEXES = {
    "dvt_hpo_trials_study_trial": "trials (study_id, trial_id)",
    "dvt_hpo_trials_study_number": "trials (study_id, number)",
    "dvt_hpo_trials_study_state": "trials (study_id, state)",
}

_log = logging.getLogger(__name__)

# The trial states Optuna stores, in its order.
STATES = ("RUNNING", "WAITING", "COMPLETE", "PRUNED", "FAIL")


@dataclass(frozen=True)
class TrialMarks:
    """A trial's number, id, state and the system attributes asked for (decoded)."""

    number: int
    trial_id: int
    state: str
    system_attrs: dict[str, Any]


def engine_of(storage: Any) -> Any | None:
    """The SQLAlchemy engine under ``storage`` (Optuna's trial cache unwrapped), or None."""
    backend = uncached(storage)
    return getattr(backend, "engine", None)


def add_indexes(storage: Any) -> None:
    """Create the missing :data:`INDEXES` (PostgreSQL). The catalog is read first: ``CREATE
    INDEX IF NOT EXISTS`` would still lock the table against writers of running studies."""
    import sqlalchemy

    engine = engine_of(storage)
    try:
        with engine.begin() as conn:
            have = set(
                conn.execute(
                    sqlalchemy.text(
                        "SELECT indexname FROM pg_indexes "
                        "WHERE schemaname = current_schema() AND tablename = 'trials'"
                    )
                ).scalars()
            )
            for name, columns in INDEXES.items():
                if name not in have:
                    conn.execute(sqlalchemy.text(f"CREATE INDEX IF NOT EXISTS {name} ON {columns}"))
    except sqlalchemy.exc.DBAPIError as exc:
        # A role that does not own Optuna's tables may not index them: the study runs as fast
        # as Optuna makes it. A lost connection shows again at the next call, with its message.
        _log.info("trials not indexed: %s", exc.orig)


def state_counts(storage: Any, study_id: int) -> dict[str, int]:
    """How many trials of the study are in each state (every state of :data:`STATES`)."""
    engine = engine_of(storage)
    if engine is None:
        from optuna.trial import TrialState

        return {name: storage.get_n_trials(study_id, TrialState[name]) for name in STATES}
    import sqlalchemy

    with engine.connect() as conn:
        rows = conn.execute(
            sqlalchemy.text(
                "SELECT state, COUNT(*) FROM trials WHERE study_id = :sid GROUP BY state"
            ),
            {"sid": study_id},
        ).all()
    found = {getattr(state, "name", str(state)): int(n) for state, n in rows}
    return {name: found.get(name, 0) for name in STATES}


def count_trials(storage: Any, study_id: int) -> int:
    """How many trials the study holds, in any state."""
    return sum(state_counts(storage, study_id).values())


def trial_marks(storage: Any, study_id: int, keys: Iterable[str]) -> list[TrialMarks]:
    """Every trial of the study by number, with its system attributes among ``keys``."""
    keys = tuple(keys)
    engine = engine_of(storage)
    if engine is None:
        return sorted(
            (
                TrialMarks(
                    t.number,
                    trial_id_of(t),
                    t.state.name,
                    {k: t.system_attrs[k] for k in keys if k in t.system_attrs},
                )
                for t in storage.get_all_trials(study_id, deepcopy=False)
            ),
            key=lambda m: m.number,
        )
    import sqlalchemy

    with engine.connect() as conn:
        trials = conn.execute(
            sqlalchemy.text(
                "SELECT number, trial_id, state FROM trials WHERE study_id = :sid ORDER BY number"
            ),
            {"sid": study_id},
        ).all()
        attrs = (
            conn.execute(
                sqlalchemy.text(
                    "SELECT a.trial_id, a.key, a.value_json FROM trial_system_attributes a "
                    "JOIN trials t ON t.trial_id = a.trial_id "
                    "WHERE t.study_id = :sid AND a.key IN :keys"
                ).bindparams(sqlalchemy.bindparam("keys", expanding=True)),
                {"sid": study_id, "keys": list(keys)},
            ).all()
            if keys
            else []
        )
    found: dict[int, dict[str, Any]] = {}
    for trial_id, key, value in attrs:
        found.setdefault(int(trial_id), {})[key] = json.loads(value)
    return [
        TrialMarks(int(n), int(tid), getattr(s, "name", str(s)), found.get(int(tid), {}))
        for n, tid, s in trials
    ]


__all__ = [
    "INDEXES",
    "STATES",
    "TrialMarks",
    "add_indexes",
    "count_trials",
    "engine_of",
    "state_counts",
    "trial_marks",
]
