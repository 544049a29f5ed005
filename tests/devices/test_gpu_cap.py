"""dvt_hpo.devices.gpu_cap: a trial's GPU share applied in its own process (the CUDA allocator's
cap) and the bytes the batch-size probes may count on. The arithmetic of a share:
tests/devices/test_gpu_share.py; the caps holding between packed trials on a real GPU:
benchmarks/gpu/gpu_check.py."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from dvt_hpo.devices import gpu_cap
from dvt_hpo.devices.gpu_cap import allowed_bytes, apply_share
from dvt_hpo.devices.gpu_share import GpuShare, GpuShareError, memory_fraction
from tests.ci_skips import NEEDS_CUDA

torch = pytest.importorskip("torch")
CUDA = torch.cuda.is_available()


@pytest.fixture
def applied(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[int, float]]:
    """What apply_share records in this test (empty at its start); every device's cap lifted
    before and after, so that no other test of the process runs under it."""
    record: dict[int, float] = {}
    monkeypatch.setattr(gpu_cap, "_applied", record)
    devices = range(torch.cuda.device_count()) if CUDA else range(0)
    for index in devices:
        torch.cuda.set_per_process_memory_fraction(1.0, index)
    yield record
    for index in devices:
        torch.cuda.set_per_process_memory_fraction(1.0, index)


def test_without_a_share_torch_is_not_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    assert apply_share(None) == {}


def test_a_share_without_torch_fails_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(GpuShareError, match=r"^trials.per_gpu=2 caps .* through torch, which") as e:
        apply_share(GpuShare(2))
    assert str(e.value).endswith("; use per_gpu: 1")


@pytest.mark.skipif(CUDA, reason="CUDA is here: the test below applies the real cap")
def test_without_cuda_a_share_applies_nothing(applied: dict[int, float]) -> None:
    assert apply_share(GpuShare(2)) == {}
    assert applied == {}


@pytest.mark.skipif(not CUDA, reason=NEEDS_CUDA)
def test_each_gpu_is_capped_at_the_share_and_the_probes_see_it(
    applied: dict[int, float], monkeypatch: pytest.MonkeyPatch
) -> None:
    totals = {
        i: torch.cuda.get_device_properties(i).total_memory
        for i in range(torch.cuda.device_count())
    }
    assert allowed_bytes(0) == totals[0]  # no cap: the whole device
    share = GpuShare(4)
    fractions = apply_share(share)
    assert fractions == {i: memory_fraction(share, total) for i, total in totals.items()}
    assert applied == fractions
    expected = int(totals[0] * fractions[0])
    assert expected < totals[0] // 4
    for device in (0, torch.device("cuda"), torch.device("cuda", 0)):
        assert allowed_bytes(device) == expected
    # A torch without the getter: the fraction apply_share recorded in this process.
    monkeypatch.delattr(torch.cuda, "get_per_process_memory_fraction")
    assert allowed_bytes(torch.device("cuda")) == expected
    applied.clear()
    assert allowed_bytes(0) == totals[0]
