"""Tiny entry points for tests: they import no torch and start in milliseconds."""
