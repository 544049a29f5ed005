"""A trial's share of a GPU (dvt_hpo.devices.gpu_share): the arithmetic and what it refuses.
Applying it in the trial process: tests/devices/test_gpu_cap.py."""

from __future__ import annotations

import pytest

from dvt_hpo.devices.gpu_share import (
    CONTEXT_RESERVE_BYTES,
    GpuShare,
    GpuShareError,
    memory_fraction,
)

GIB = 1 << 30


@pytest.mark.parametrize(
    ("per_gpu", "total_gib", "reserve_gib", "expected"),
    [
        (2, 80, 1, (80 - 2) / (2 * 80)),
        (4, 141, 1, (141 - 4) / (4 * 141)),
        (4, 16, 0, 0.25),  # no reserve: exactly 1/K
        (8, 24, 2, (24 - 16) / (8 * 24)),
    ],
)
def test_each_share_is_a_kth_of_the_gpu_less_its_context_reserve(
    per_gpu: int, total_gib: int, reserve_gib: int, expected: float
) -> None:
    share = GpuShare(per_gpu, reserve_gib * GIB)
    fraction = memory_fraction(share, total_gib * GIB)
    assert fraction == pytest.approx(expected)
    # K capped allocators plus K reserves never exceed the GPU.
    used = per_gpu * (fraction * total_gib * GIB + share.reserve_bytes)
    assert used == pytest.approx(total_gib * GIB)
    assert fraction <= 1 / per_gpu


def test_the_default_reserve_is_one_gib_per_trial() -> None:
    assert GpuShare(2).reserve_bytes == CONTEXT_RESERVE_BYTES == GIB
    assert GpuShare(4).label() == "1/4"


def test_a_share_that_leaves_nothing_is_refused_with_the_numbers() -> None:
    with pytest.raises(GpuShareError, match=r"per_gpu=8 leaves no memory .* 8GiB.*1GiB"):
        memory_fraction(GpuShare(8), 8 * GIB)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"per_gpu": 1}, "per_gpu >= 2"),
        ({"per_gpu": True}, "must be an int"),
        ({"per_gpu": 2.0}, "must be an int"),
        ({"per_gpu": 2, "reserve_bytes": -1}, ">= 0"),
    ],
)
def test_a_share_is_checked(kwargs: dict[str, object], error: str) -> None:
    with pytest.raises((TypeError, ValueError), match=error):
        GpuShare(**kwargs)  # type: ignore[arg-type]
