"""dvt_hpo.batch.cache: the footprint key, the trial's entry key, which cached entries count."""

from __future__ import annotations

from typing import Any

import pytest

from dvt_hpo.batch.cache import cache_entry_key, cache_key, usable_size
from dvt_hpo.batch.spec import BatchSizeSpec


def test_the_footprint_key_reads_only_the_memory_keys() -> None:
    a = cache_key({"model": {"width": 8}, "lr": 0.1}, ("model.width",), {})
    b = cache_key({"model": {"width": 8}, "lr": 0.5}, ("model.width",), {})
    c = cache_key({"model": {"width": 16}, "lr": 0.1}, ("model.width",), {})
    assert a == b != c
    assert cache_key({}, ("model.width",), {}) != a  # a missing key is a value too


def test_the_entry_key_separates_devices_and_caps() -> None:
    keys = {
        cache_entry_key("k", "cpu"),
        cache_entry_key("k", "cuda:A100 80GB"),
        cache_entry_key("k", "cpu", 30),
        cache_entry_key("other", "cpu"),
    }
    assert len(keys) == 4


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"batch_size": 32}, 32),
        ({"batch_size": 4}, None),  # below min: the bounds changed since it was stored
        ({"batch_size": 128}, None),
        ({"batch_size": True}, None),
        ({"batch_size": "32"}, None),
        ([32], None),
        (None, None),
    ],
)
def test_usable_size_keeps_an_entry_within_the_bounds(entry: Any, expected: int | None) -> None:
    assert usable_size(entry, BatchSizeSpec(auto=True, min=8, max=64)) == expected
