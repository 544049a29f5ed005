"""The study database: storages and their URLs, errors and retries, the creation lock, reading a
stored study without writing, the stored-study comparison, the trial configs kept in storage.
Never imports torch."""
