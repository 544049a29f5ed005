"""Device slots (dvt_hpo.process.devices): trials.devices, canonical, split among parallel slots."""

from __future__ import annotations

from typing import Any

import pytest

from dvt_hpo.exceptions import SpecError
from dvt_hpo.process.devices import split_devices, visible_gpus


@pytest.mark.parametrize(
    ("devices", "parallel", "nproc", "gpus", "expected"),
    [
        ("auto", 2, 1, 0, [("", 4), ("", 4)]),
        ("auto", 1, 1, 4, [("0,1,2,3", 8)]),
        ("auto", 2, 1, 4, [("0,1", 4), ("2,3", 4)]),
        ("auto", 3, 1, 4, [("0", 2), ("1", 2), ("2", 2)]),  # the 4th GPU stays unused
        ("cpu", 3, 1, 4, [("", 2), ("", 2), ("", 2)]),
        ("cpu", 16, 1, 0, [("", 1)] * 16),
        (2, 2, 1, 4, [("0", 4), ("1", 4)]),
        ((1, 3), 1, 2, 4, [("1,3", 4)]),
        ((0, 1), 2, 1, 2, [("0", 4), ("1", 4)]),
        ((2,), 1, 1, 4, [("2", 8)]),
        ("cuda", 2, 2, 4, [("0,1", 2), ("2,3", 2)]),
        ("auto", 1, 1, ["GPU-a", "GPU-b"], [("GPU-a,GPU-b", 8)]),
        ((1,), 1, 1, ["4", "6"], [("6", 8)]),  # indexes into CUDA_VISIBLE_DEVICES
    ],
)
def test_split_devices(
    devices: Any, parallel: int, nproc: int, gpus: Any, expected: list[tuple[str, int]]
) -> None:
    slots = split_devices(devices, parallel, nproc_per_node=nproc, cpu_count=8, gpus=gpus)
    assert [(s.cuda_visible_devices, s.omp_num_threads) for s in slots] == expected
    assert [s.index for s in slots] == list(range(parallel))


@pytest.mark.parametrize(
    ("devices", "parallel", "nproc", "gpus", "error"),
    [
        ("cuda", 1, 1, 0, "none is visible"),
        (2, 1, 1, 0, "2 asks for 2 GPUs but 0 are visible"),
        (0, 1, 1, 2, "must be >= 1"),
        ((0, 5), 1, 1, 2, "GPU index 5 is not visible"),
        ((0, 0), 1, 1, 2, "twice"),
        ((0, 1), 3, 1, 4, "trials.parallel=3 needs at least one"),
        ("auto", 2, 2, 2, "trials.nproc_per_node=2 needs one per process"),
        ("tpu", 1, 1, 2, "must be 'auto', 'cpu'"),
        ("0,1", 1, 1, 2, "must be 'auto', 'cpu'"),  # strings are the spec's to parse
        ([0, 1], 1, 1, 2, "must be 'auto', 'cpu'"),
        (True, 1, 1, 2, "must be 'auto', 'cpu'"),
        ("auto", 0, 1, 2, "must be >= 1"),
    ],
)
def test_split_devices_errors(
    devices: Any, parallel: int, nproc: int, gpus: Any, error: str
) -> None:
    with pytest.raises(SpecError, match=error) as info:
        split_devices(devices, parallel, nproc_per_node=nproc, cpu_count=8, gpus=gpus)
    assert info.value.field in ("trials.devices", "trials.parallel")


def test_visible_gpus_from_cuda_visible_devices() -> None:
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "1,-1,2"}) == ["1"]
    assert isinstance(visible_gpus({}), list)  # this machine's answer, whatever it is
