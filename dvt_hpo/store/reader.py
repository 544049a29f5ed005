"""Open an existing study for reading (best, status, report, dashboard), never creating anything.

Optuna creates a SQLite file or a journal on first open, tables in an empty database, and a
study only through ``create_study``; :func:`dvt_hpo.store.storage.open_existing` checks each before
opening, so a study that has not run yet is one line (exit 1), and nothing is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dvt_hpo.optuna_api.private import study_id_of

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.studyfile import StudySpec


def open_existing_study(spec: StudySpec) -> optuna.Study:
    import optuna

    from dvt_hpo.store.storage import open_existing

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return open_existing(spec.study.storage, spec.study.name, source=spec.path)


def open_existing_storage(spec: StudySpec) -> tuple[optuna.storages.BaseStorage, int]:
    """The spec's storage and its study's id, for readers that query the storage directly.
    Not wrapped in Optuna's trial cache, which loads every trial on first use."""
    from dvt_hpo.store.storage import study_storage

    study = open_existing_study(spec)
    storage = study_storage(study)
    return storage, study_id_of(study)


__all__ = ["open_existing_storage", "open_existing_study"]
