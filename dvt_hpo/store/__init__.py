"""The study database: the one way to open a study (:mod:`~dvt_hpo.store.opening`: create or
load, load, read without writing), the storages it opens on, errors and retries, the creation
lock, the stored-study comparison, the trial configs kept in storage. Never imports torch."""
