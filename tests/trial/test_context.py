"""TrialContext over a real control channel (in-process client) and LocalContext."""

from __future__ import annotations

import io
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dvt_hpo.batch.cache import cache_entry_key
from dvt_hpo.batch.search import Probe
from dvt_hpo.exceptions import BatchSizeError, TrialPruned
from dvt_hpo.studyfile import BatchSizeSpec
from dvt_hpo.trial.context import LocalContext, TrialContext, distributed_env
from dvt_hpo.wire.control_client import ControlClient
from dvt_hpo.wire.control_server import ControlServer
from tests.entrypoints.recording import RecordingHandler

SETTINGS = BatchSizeSpec(auto=True, min=1, max=256, tolerance=0.0)
CACHE_KEY = "model-a"


class Channel:
    """One server (one trial) with its handler; contexts for any rank connect to it."""

    def __init__(self, handler: RecordingHandler) -> None:
        self.handler = handler
        self.server = ControlServer(None, handler)
        self.clients: list[ControlClient] = []

    def context(self, rank: int = 0, **kwargs: Any) -> TrialContext:
        client = ControlClient.connect(self.server.path, rank=rank)
        self.clients.append(client)
        kwargs.setdefault("batch_size", SETTINGS)
        kwargs.setdefault("cache_key", CACHE_KEY)
        return TrialContext(client, trial_number=7, rank=rank, world_size=2, **kwargs)

    def close(self) -> None:
        for client in self.clients:
            client.close()
        self.server.close()


@pytest.fixture
def cache() -> dict[str, dict[str, Any]]:
    """The study-level cache, shared by the trials (channels) of one test."""
    return {}


@pytest.fixture
def channel_factory(
    cache: dict[str, dict[str, Any]],
) -> Iterator[Callable[..., Channel]]:
    channels: list[Channel] = []

    def make(prune: Callable[[int, dict[str, float]], bool] | None = None) -> Channel:
        channel = Channel(RecordingHandler(prune=prune, cache=cache))
        channels.append(channel)
        return channel

    yield make
    for channel in channels:
        channel.close()


@pytest.fixture
def channel(channel_factory: Callable[..., Channel]) -> Channel:
    return channel_factory(lambda step, metrics: metrics.get("loss", 0.0) > 1.0)


def fits_up_to(capacity: int, calls: list[int] | None = None) -> Callable[[int], bool]:
    def fits(n: int) -> bool:
        if calls is not None:
            calls.append(n)
        return n <= capacity

    return fits


# -- report and attrs --------------------------------------------------------------------


def test_report_sends_metrics_and_raises_trial_pruned_on_prune(channel: Channel) -> None:
    ctx = channel.context()
    ctx.report(0, {"loss": 0.5, "acc": 1})
    with pytest.raises(TrialPruned) as info:
        ctx.report(1, {"loss": 2.0})
    assert info.value.step == 1 and ctx.pruned_step == 1
    assert channel.handler.reports == [(0, {"loss": 0.5, "acc": 1.0}), (1, {"loss": 2.0})]
    assert ctx.history == channel.handler.reports


def test_reporting_the_same_step_twice_is_an_error(channel: Channel) -> None:
    # Optuna keeps only a step's first value: a second report would silently not count for
    # pruning while the objective used it.
    ctx = channel.context()
    ctx.report(0, {"loss": 0.5})
    with pytest.raises(ValueError, match="step 0 was already reported"):
        ctx.report(0, {"loss": 0.4})
    assert channel.handler.reports == [(0, {"loss": 0.5})]
    ctx.report(2, {"loss": 0.3})  # steps may skip; only a repeat is refused
    local = LocalContext(out=io.StringIO())
    local.report(1, {"loss": 1.0})
    with pytest.raises(ValueError, match="step 1 was already reported"):
        local.report(1, {"loss": 1.0})


def test_other_ranks_do_not_report_but_check_their_arguments(channel: Channel) -> None:
    ctx = channel.context(rank=1)
    ctx.report(0, {"loss": 5.0})  # would be pruned on the chief
    ctx.set_user_attr("x", 1)
    assert channel.handler.wait_hellos(1, 10)
    with pytest.raises(TypeError, match="'loss' must be a number"):
        ctx.report(1, {"loss": "high"})
    chief = channel.context(rank=0)
    chief.set_user_attr("done", True)
    channel.handler.wait_attr("done", 10)
    assert channel.handler.reports == [] and "x" not in channel.handler.attrs
    assert ctx.user_attrs == {"x": 1}


@pytest.mark.parametrize(
    ("step", "metrics", "error"),
    [
        (-1, {"loss": 1.0}, "step must be an int >= 0"),
        (1.5, {"loss": 1.0}, "step must be an int >= 0"),
        (True, {"loss": 1.0}, "step must be an int >= 0"),
        (0, [("loss", 1.0)], "dict of numbers"),
        (0, {1: 1.0}, "names must be non-empty strings"),
        (0, {"loss": None}, "'loss' must be a number"),
    ],
)
def test_report_rejects_bad_arguments(
    channel: Channel, step: Any, metrics: Any, error: str
) -> None:
    with pytest.raises((TypeError, ValueError), match=error):
        channel.context().report(step, metrics)


def test_nan_metrics_reach_the_orchestrator(channel: Channel) -> None:
    channel.context().report(0, {"loss": math.nan})
    assert math.isnan(channel.handler.reports[0][1]["loss"])


def test_report_without_a_decision_in_time_warns_and_goes_on(
    channel_factory: Callable[..., Channel],
) -> None:
    release = threading.Event()

    def slow(step: int, metrics: dict[str, float]) -> bool:
        release.wait(10)
        return True  # too late to count

    channel = channel_factory(slow)
    warnings = io.StringIO()
    ctx = channel.context(report_timeout_s=0.2, warn=warnings)
    try:
        ctx.report(0, {"loss": 0.1})  # no TrialPruned: the decision came too late
    finally:
        release.set()
    assert "no pruning decision for step 0 within trials.report_timeout_s=0.2 s" in (
        warnings.getvalue()
    )
    assert ctx.pruned_step is None


def test_user_attrs_must_be_json(channel: Channel) -> None:
    ctx = channel.context()
    ctx.set_user_attr("layers", [1, 2, {"a": None}])
    assert channel.handler.wait_attr("layers", 10) == [1, 2, {"a": None}]
    with pytest.raises(TypeError, match="user attr 'bad' must be JSON"):
        ctx.set_user_attr("bad", object())
    with pytest.raises(TypeError, match="non-empty string"):
        ctx.set_user_attr("", 1)


# -- batch size ---------------------------------------------------------------------------


def test_batch_size_off_returns_none(channel: Channel) -> None:
    ctx = channel.context(batch_size=BatchSizeSpec(auto=False))
    assert ctx.find_batch_size(fits_up_to(10)) is None
    assert channel.context(batch_size=None).find_batch_size(fits_up_to(10)) is None


def test_cache_miss_then_hit_then_stale(channel_factory: Callable[..., Channel]) -> None:
    first = channel_factory()
    choice = first.context().find_batch_size(fits_up_to(100), device="cpu-test")
    assert choice is not None
    assert (choice.found, choice.batch_size, choice.cache) == (100, 100, "miss")
    assert choice.probes == len(choice.probe_sizes) > 1
    key = cache_entry_key("model-a", "cpu-test")
    assert first.handler.wait_for(lambda h: len(h.cache_puts) == 1, 10)
    assert first.handler.cache_puts[0][0] == key
    assert first.handler.cache_puts[0][1]["batch_size"] == 100
    attrs = {k: first.handler.wait_attr(k, 10) for k in ("batch_size", "batch_size_probe_sizes")}
    assert attrs["batch_size"] == 100 and attrs["batch_size_probe_sizes"][-1] in (100, 101)
    assert first.handler.attrs["batch_size_cache"] == "miss"

    calls: list[int] = []
    hit = channel_factory().context().find_batch_size(fits_up_to(100, calls), device="cpu-test")
    assert hit is not None and (hit.found, hit.cache, hit.probes) == (100, "hit", 1)
    assert calls == [100]

    calls.clear()
    third = channel_factory()
    stale = third.context().find_batch_size(fits_up_to(60, calls), device="cpu-test")
    assert stale is not None and (stale.found, stale.cache) == (60, "stale")
    assert calls[0] == 100 and stale.probes == len(calls)
    assert third.handler.wait_for(lambda h: len(h.cache_puts) == 1, 10)
    assert third.handler.cache_puts[0][1]["batch_size"] == 60


def test_the_cache_key_includes_the_device(channel_factory: Callable[..., Channel]) -> None:
    channel_factory().context().find_batch_size(fits_up_to(100), device="gpu-a 80GB")
    other = channel_factory().context().find_batch_size(fits_up_to(40), device="gpu-b 16GB")
    assert other is not None and (other.found, other.cache) == (40, "miss")


def test_the_training_set_caps_the_search_and_keys_the_cache(
    channel_factory: Callable[..., Channel], capfd: pytest.CaptureFixture[str]
) -> None:
    # Probes run on random tensors of any size: 30 training samples never fill a batch of 256.
    first = channel_factory()
    choice = first.context().find_batch_size(fits_up_to(1000), device="cpu-test", samples=30)
    assert choice is not None and (choice.found, choice.data_cap) == (30, 30)
    assert max(choice.probe_sizes) == 30
    assert first.handler.wait_attr("batch_size_data_cap", 10) == 30
    assert "capped at 30, the training samples per process" in capfd.readouterr().err
    assert first.handler.wait_for(lambda h: len(h.cache_puts) == 1, 10)
    assert first.handler.cache_puts[0][0] == cache_entry_key("model-a", "cpu-test", 30)
    # Another data size is another entry: the size found under the cap is no answer there.
    more = channel_factory().context().find_batch_size(fits_up_to(1000), device="cpu-test")
    assert more is not None and (more.found, more.cache, more.data_cap) == (256, "miss", None)
    # A set larger than batch_size.max does not cap (and says nothing); nor does one that
    # memory bounds first.
    big = channel_factory().context().find_batch_size(fits_up_to(40), samples=5000)
    assert big is not None and (big.found, big.data_cap) == (40, None)
    tight = channel_factory().context().find_batch_size(fits_up_to(20), device="x", samples=30)
    assert tight is not None and (tight.found, tight.data_cap) == (20, None)
    assert "capped" not in capfd.readouterr().err


def test_a_cached_size_outside_the_bounds_is_a_miss(
    channel_factory: Callable[..., Channel], cache: dict[str, dict[str, Any]]
) -> None:
    cache[cache_entry_key("model-a", "cpu")] = {"batch_size": 500}
    choice = channel_factory().context().find_batch_size(fits_up_to(1000))
    assert choice is not None and (choice.found, choice.cache) == (256, "miss")


def test_agree_runs_once_on_every_path_and_only_the_chief_stores(
    channel_factory: Callable[..., Channel],
) -> None:
    agreed: list[int] = []

    def agree_min_with_48(n: int) -> int:
        agreed.append(n)
        return min(n, 48)

    trial = channel_factory()
    worker = trial.context(rank=1).find_batch_size(fits_up_to(100), agree=agree_min_with_48)
    assert worker is not None and worker.found == 48
    chief = trial.context(rank=0).find_batch_size(fits_up_to(100), agree=agree_min_with_48)
    assert chief is not None and chief.found == 48
    assert agreed == [100, 100]
    assert trial.handler.wait_for(lambda h: len(h.cache_puts) == 1, 10)
    assert trial.handler.cache_puts[0][1]["batch_size"] == 48  # the agreed size, once

    agreed.clear()
    hit = channel_factory().context().find_batch_size(fits_up_to(100), agree=agree_min_with_48)
    assert hit is not None and (hit.found, hit.cache, hit.probes) == (48, "hit", 1)
    assert agreed == [48]


def test_agree_must_return_a_positive_int(channel: Channel) -> None:
    with pytest.raises(TypeError, match="agree"):
        channel.context().find_batch_size(fits_up_to(10), agree=lambda n: 0)


def test_both_ranks_see_the_same_cache_entry_even_if_another_trial_writes_it(
    channel_factory: Callable[..., Channel], cache: dict[str, dict[str, Any]]
) -> None:
    trial = channel_factory()
    key = cache_entry_key("model-a", "cpu")
    barrier = threading.Barrier(2, timeout=10)
    sizes: dict[int, int] = {}
    choices: dict[int, Any] = {}

    def agree_min(rank: int) -> Callable[[int], int]:
        def agree(n: int) -> int:  # an all-reduce MIN between two threads
            sizes[rank] = n
            barrier.wait()
            return min(sizes.values())

        return agree

    def run(rank: int) -> None:
        ctx = trial.context(rank=rank)
        choices[rank] = ctx.find_batch_size(fits_up_to(100), agree=agree_min(rank))

    chief = threading.Thread(target=run, args=(0,))
    chief.start()
    assert trial.handler.wait_for(lambda h: h.cache_gets == [key], 10)
    cache[key] = {"batch_size": 8}  # a parallel trial stores its size between the two gets
    worker = threading.Thread(target=run, args=(1,))
    worker.start()
    chief.join(10)
    worker.join(10)
    assert (choices[0].cache, choices[1].cache) == ("miss", "miss")
    assert choices[0].found == choices[1].found == 100
    assert trial.handler.cache_gets == [key]  # rank 1 was answered from the snapshot


def test_effective_batch_sets_accumulation(channel: Channel) -> None:
    settings = BatchSizeSpec(auto=True, min=1, max=256, tolerance=0.0, effective=200)
    choice = channel.context(batch_size=settings).find_batch_size(fits_up_to(70))
    assert choice is not None
    assert (choice.found, choice.accumulate_steps, choice.batch_size) == (70, 3, 67)
    assert channel.handler.wait_attr("accumulate_steps", 10) == 3


def test_out_of_memory_counts_as_too_big_and_other_errors_propagate(channel: Channel) -> None:
    def fits(n: int) -> Probe:
        if n > 32:
            raise MemoryError(f"{n} does not fit")
        return Probe(True, peak_bytes=n * 1000, available_bytes=40_000)

    choice = channel.context().find_batch_size(fits)
    assert choice is not None and choice.found == 32
    assert any(record.oom for record in choice.records)

    def broken(n: int) -> bool:
        raise ValueError("shape mismatch")

    with pytest.raises(ValueError, match="shape mismatch"):
        channel.context().find_batch_size(broken)
    with pytest.raises(BatchSizeError):
        channel.context(batch_size=BatchSizeSpec(auto=True, min=4, max=8)).find_batch_size(
            fits_up_to(2)
        )


# -- settings and env ------------------------------------------------------------------------


def test_distributed_env() -> None:
    assert distributed_env({}) == (0, 0, 1)
    assert distributed_env({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}) == (3, 1, 4)
    with pytest.raises(ValueError, match=r"\$RANK must be an int"):
        distributed_env({"RANK": "x"})


# -- LocalContext ------------------------------------------------------------------------------


def test_local_context_prints_reports_and_never_prunes() -> None:
    out = io.StringIO()
    ctx = LocalContext(out=out, env={})
    ctx.report(3, {"loss": 0.123456, "macro_f1": 0.96123})
    ctx.report(4, {"loss": 12345.678})
    ctx.set_user_attr("k", [1])
    assert out.getvalue().splitlines() == [
        "epoch 3: loss=0.1235 macro_f1=0.9612",
        "epoch 4: loss=12345.7",
    ]
    assert ctx.user_attrs == {"k": [1]} and ctx.is_chief and ctx.trial_number is None


def test_local_context_searches_without_a_cache() -> None:
    ctx = LocalContext(batch_size=BatchSizeSpec(auto=True, min=2, max=64, tolerance=0.0), env={})
    choice = ctx.find_batch_size(fits_up_to(20))
    assert choice is not None and (choice.found, choice.cache) == (20, "off")
    assert ctx.user_attrs["batch_size"] == 20
    assert LocalContext(env={}).find_batch_size(fits_up_to(20)) is None


def test_local_context_reports_only_on_the_chief() -> None:
    out = io.StringIO()
    LocalContext(out=out, env={"RANK": "1", "WORLD_SIZE": "2"}).report(0, {"loss": 1.0})
    assert out.getvalue() == ""


def test_local_context_takes_the_batch_size_section_as_a_mapping_too() -> None:
    ctx = LocalContext(batch_size={"auto": True, "min": 2, "max": 64, "tolerance": 0.0}, env={})
    assert ctx.batch_size_settings == BatchSizeSpec(auto=True, min=2, max=64, tolerance=0.0)
    with pytest.raises(TypeError, match="batch_size: unknown key 'maximum'"):
        LocalContext(batch_size={"auto": True, "maximum": 3}, env={})
    with pytest.raises(TypeError, match="batch_size min: expected int"):
        LocalContext(batch_size={"min": "8"}, env={})
