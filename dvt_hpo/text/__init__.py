"""Stdlib text helpers below every package, :mod:`dvt_hpo.exceptions` included: secrets taken
out of URLs and messages (``redact``)."""
