"""The batch-size cache: sizes found by one trial, reused by later trials of the same footprint.

A trial's footprint is the hash of the config values that decide its memory
(``batch_size.memory_keys``) and what else the orchestrator knows of it (:func:`cache_key`, on
the orchestrator side); the trial process adds its device and the cap its data puts on the
search (:func:`cache_entry_key`) and takes an entry only when it lies within its bounds
(:func:`usable_size`). Entries live in the study's system attrs (:class:`StudyCache`), so every
worker and every resume shares them.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from typing import Any

from dvt_hpo.batch.spec import BatchSizeSpec
from dvt_hpo.config.paths import get_path

CACHE_PREFIX = "dvt_hpo:batch_size_cache:"


def cache_key(config: Mapping[str, Any], keys: tuple[str, ...], extra: Mapping[str, Any]) -> str:
    """Hash of the config values that decide a trial's memory footprint."""
    values: dict[str, Any] = {}
    for path in keys:
        try:
            values[path] = get_path(config, path)
        except (KeyError, IndexError, AttributeError):
            values[path] = None
    blob = json.dumps({"keys": values, "extra": extra}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def cache_entry_key(cache_key: str, device: str, data_cap: int | None = None) -> str:
    """The study cache's key: the payload's ``cache_key``, the device description and the cap
    the training set put on the search (a size found under one cap is no answer for a larger
    one)."""
    text = f"{cache_key}\n{device}" + (f"\ncap {data_cap}" if data_cap is not None else "")
    return hashlib.sha256(text.encode()).hexdigest()


def usable_size(entry: Any, settings: BatchSizeSpec) -> int | None:
    """The cached size when it is valid for these settings (the bounds may have changed
    since it was stored), else None."""
    if not isinstance(entry, Mapping):
        return None
    size = entry.get("batch_size")
    if isinstance(size, bool) or not isinstance(size, int):
        return None
    if not settings.min <= size <= settings.max:
        return None
    return size


class StudyCache:
    """The batch-size cache in study system attrs, so every worker and resume shares it."""

    def __init__(self, storage: Any, study_id: int, lock: threading.RLock) -> None:
        self._storage = storage
        self._study_id = study_id
        self._lock = lock

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            value = self._storage.get_study_system_attrs(self._study_id).get(CACHE_PREFIX + key)
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        with self._lock:
            self._storage.set_study_system_attr(self._study_id, CACHE_PREFIX + key, value)


__all__ = ["CACHE_PREFIX", "StudyCache", "cache_entry_key", "cache_key", "usable_size"]
