"""Open an existing study for reading (status, report, dashboard), never creating anything.

Optuna creates a SQLite file or a journal on first open, and a study only through
``create_study``; so a missing file is checked before opening, and a missing study is Optuna's
``KeyError`` turned into one line. Either is a runtime error (exit 1), not bad input: the study
file is fine, the study just has not run yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dvt_hpo.exceptions import DvtHpoError

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec import StudySpec


def open_existing_storage(spec: StudySpec) -> tuple[optuna.storages.BaseStorage, int]:
    """The spec's storage and its study's id, opened through the project's storage settings
    (SQLite WAL and busy timeout, so reading beside a running study never hits "database is
    locked"). Not wrapped in Optuna's trial cache, which loads every trial on first use."""
    import optuna

    from dvt_hpo.storage import journal_path, open_storage, redact_url, sqlite_path

    url = spec.study.storage
    db = sqlite_path(url) or journal_path(url)
    if db is not None and not db.exists():
        raise DvtHpoError(f"no study yet: {db} does not exist; run `dvt-hpo run {spec.path}`")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        storage = open_storage(url)
    except Exception as exc:  # noqa: BLE001 - a server that does not answer is one line
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise DvtHpoError(
            f"cannot open {redact_url(url)}: {redact_url(f'{type(exc).__name__}: {first}')}"
        ) from None
    try:
        return storage, storage.get_study_id_from_name(spec.study.name)
    except KeyError:
        raise DvtHpoError(
            f"study {spec.study.name!r} is not in {redact_url(url)}; "
            f"run `dvt-hpo run {spec.path}` first"
        ) from None


def open_existing_study(spec: StudySpec) -> optuna.Study:
    import optuna

    storage, _ = open_existing_storage(spec)
    return optuna.load_study(study_name=spec.study.name, storage=storage)


__all__ = ["open_existing_storage", "open_existing_study"]
