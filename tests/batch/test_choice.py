"""dvt_hpo.batch.choice: a trial's batch-size decision without a context (cache, cap, split)."""

from __future__ import annotations

from typing import Any

import pytest

from dvt_hpo.batch.cache import cache_entry_key
from dvt_hpo.batch.choice import (
    CacheChannel,
    choose_batch_size,
    effective_split,
    grid_top,
    settings_from_mapping,
)
from dvt_hpo.batch.spec import BatchSizeSpec
from dvt_hpo.exceptions import BatchSizeError

SETTINGS = BatchSizeSpec(auto=True, min=1, max=256, tolerance=0.0)


class Cache:
    def __init__(self, entries: dict[str, dict[str, Any]] | None = None) -> None:
        self.entries = dict(entries or {})
        self.puts: list[tuple[str, dict[str, Any]]] = []

    def channel(self, key: str = "model-a") -> CacheChannel:
        return CacheChannel(self.entries.get, self._put, key)

    def _put(self, key: str, value: dict[str, Any]) -> None:
        self.puts.append((key, value))
        self.entries[key] = value


def choose(fits: Any, settings: BatchSizeSpec = SETTINGS, **kw: Any) -> Any:
    attrs: dict[str, Any] = {}
    args: dict[str, Any] = {
        "device": "cpu",
        "agree": None,
        "samples": None,
        "cache": None,
        "chief": True,
        "trial_number": 3,
        "set_attrs": attrs.update,
        **kw,
    }
    return choose_batch_size(fits, settings, **args), attrs


def test_without_a_cache_the_search_runs_and_stores_nothing() -> None:
    choice, attrs = choose(lambda n: n <= 70)
    assert (choice.found, choice.cache, choice.batch_size) == (70, "off", 70)
    assert attrs == {}  # the context records choice.user_attrs() itself


def test_a_cached_size_gets_one_verifying_probe_and_is_not_stored_again() -> None:
    cache = Cache({cache_entry_key("model-a", "cpu"): {"batch_size": 40}})
    probed: list[int] = []
    choice, _ = choose(lambda n: probed.append(n) or n <= 70, cache=cache.channel())
    assert (choice.cache, choice.found, probed) == ("hit", 40, [40])
    assert cache.puts == []


def test_a_stale_entry_searches_again_and_the_chief_stores_the_new_size() -> None:
    key = cache_entry_key("model-a", "cpu")
    cache = Cache({key: {"batch_size": 100}})
    choice, _ = choose(lambda n: n <= 70, cache=cache.channel())
    assert (choice.cache, choice.found) == ("stale", 70)
    assert cache.puts == [(key, {"batch_size": 70, "device": "cpu", "trial_number": 3})]
    other = Cache({key: {"batch_size": 100}})
    choose(lambda n: n <= 70, cache=other.channel(), chief=False)
    assert other.puts == []


def test_the_data_caps_the_search_and_keys_the_cache() -> None:
    cache = Cache()
    choice, _ = choose(lambda n: True, samples=30, cache=cache.channel())
    assert (choice.found, choice.data_cap) == (30, 30)
    assert cache.puts[0][0] == cache_entry_key("model-a", "cpu", 30)


def test_a_failed_search_records_what_it_probed() -> None:
    seen: dict[str, Any] = {}
    with pytest.raises(BatchSizeError):
        choose(lambda n: False, BatchSizeSpec(auto=True, min=4, max=8), set_attrs=seen.update)
    assert seen["batch_size_probes"] == len(seen["batch_size_probe_sizes"]) >= 1


def test_agree_must_answer_a_positive_int() -> None:
    with pytest.raises(TypeError, match=r"agree\(70\) must return an int >= 1, got 0"):
        choose(lambda n: n <= 70, agree=lambda n: 0)


@pytest.mark.parametrize(
    ("found", "effective", "expected"),
    [(64, None, (64, 1)), (64, 256, (64, 4)), (70, 200, (67, 3)), (512, 100, (100, 1))],
)
def test_effective_split(found: int, effective: int | None, expected: tuple[int, int]) -> None:
    batch, accumulate = effective_split(found, effective)
    assert (batch, accumulate) == expected
    assert batch <= found
    if effective is not None:
        assert batch * accumulate >= effective


def test_grid_top_rounds_max_down_to_the_multiple() -> None:
    assert grid_top(BatchSizeSpec(min=1, max=100, multiple_of=8)) == 96
    assert grid_top(BatchSizeSpec(min=97, max=100, multiple_of=8)) == 100


def test_settings_from_a_mapping_are_checked() -> None:
    assert settings_from_mapping({"auto": True, "max": 64}) == BatchSizeSpec(auto=True, max=64)
    with pytest.raises(TypeError):
        settings_from_mapping({"auto": True, "maxx": 64})
