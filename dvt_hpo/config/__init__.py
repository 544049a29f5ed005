"""The one engine per job that every side shares: the schema engine, the YAML reader with
line numbers and ``--set``, dotted paths, the wording of bad-input hints, units. Stdlib and PyYAML
only (the trial process imports it too)."""
