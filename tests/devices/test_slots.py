"""Device slots (dvt_hpo.devices.slots): trials.devices, canonical, split among parallel slots."""

from __future__ import annotations

from typing import Any

import pytest

from dvt_hpo.devices.slots import packing_text, split_devices, visible_gpus
from dvt_hpo.exceptions import SpecError


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


# -- trials.per_gpu: K slots share each GPU -------------------------------------------------


@pytest.mark.parametrize(
    ("devices", "parallel", "per_gpu", "gpus", "expected"),
    [
        ("auto", 4, 4, 1, ["0", "0", "0", "0"]),
        ("auto", 4, 2, 2, ["0", "1", "0", "1"]),
        ("auto", 2, 2, 2, ["0", "1"]),  # fewer than every share: spread, one per GPU
        ("auto", 3, 2, 2, ["0", "1", "0"]),
        ((1, 3), 4, 2, 4, ["1", "3", "1", "3"]),
        (1, 3, 3, ["GPU-a", "GPU-b"], ["GPU-a", "GPU-a", "GPU-a"]),
    ],
)
def test_shared_slots_are_dealt_round_robin_with_the_share(
    devices: Any, parallel: int, per_gpu: int, gpus: Any, expected: list[str]
) -> None:
    slots = split_devices(devices, parallel, per_gpu=per_gpu, cpu_count=8, gpus=gpus)
    assert [s.cuda_visible_devices for s in slots] == expected
    assert [s.index for s in slots] == list(range(parallel))
    assert {s.per_gpu for s in slots} == {per_gpu}
    assert {s.omp_num_threads for s in slots} == {max(1, 8 // parallel)}
    for gpu in set(expected):
        assert expected.count(gpu) <= per_gpu


def test_per_gpu_one_keeps_whole_gpus_and_no_gpu_ignores_it() -> None:
    whole = split_devices("auto", 2, per_gpu=1, cpu_count=4, gpus=4)
    assert [(s.cuda_visible_devices, s.per_gpu) for s in whole] == [("0,1", 1), ("2,3", 1)]
    # 'auto' without a GPU: nothing to share, the slots are the CPU's.
    cpu = split_devices("auto", 3, per_gpu=4, cpu_count=6, gpus=0)
    assert [(s.cuda_visible_devices, s.omp_num_threads, s.per_gpu) for s in cpu] == [("", 2, 1)] * 3


@pytest.mark.parametrize(
    ("devices", "parallel", "nproc", "per_gpu", "gpus", "field", "error"),
    [
        ("auto", 5, 1, 2, 2, "trials.parallel",
         r"trials.parallel=5 but 'auto' selects 2 GPU\(s\) \(0,1\) x trials.per_gpu=2 = 4 "
         r"trial slot\(s\); lower trials.parallel to 4"),
        ((0,), 3, 1, 2, 2, "trials.parallel", r"\[0\] selects 1 GPU\(s\) .* = 2 trial slot"),
        ("auto", 1, 2, 2, 2, "trials.per_gpu",
         "per_gpu=2 packs trials of one process each .* trials.nproc_per_node=2"),
        ("auto", 1, 1, 0, 2, "trials.per_gpu", "must be >= 1, got 0"),
        ("cuda", 1, 1, 2, 0, "trials.devices", "none is visible"),
    ],
)  # fmt: skip
def test_shared_slots_errors_name_the_rule(
    devices: Any, parallel: int, nproc: int, per_gpu: int, gpus: Any, field: str, error: str
) -> None:
    with pytest.raises(SpecError, match=error) as info:
        split_devices(
            devices, parallel, nproc_per_node=nproc, per_gpu=per_gpu, cpu_count=8, gpus=gpus
        )
    assert info.value.field == field


@pytest.mark.parametrize("n_gpus", [1, 2, 3, 4])
@pytest.mark.parametrize("per_gpu", [2, 3, 4])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_workers_block_of_shared_slots_resplits_to_the_same_gpus(
    n_gpus: int, per_gpu: int, workers: int
) -> None:
    # --workers: the parent deals contiguous blocks; each worker sees only its GPUs (each
    # once, in the order its slots name them) and splits again with the same per_gpu.
    gpus = [f"g{i}" for i in range(n_gpus)]
    for parallel in range(1, n_gpus * per_gpu // workers + 1):
        slots = split_devices("auto", workers * parallel, per_gpu=per_gpu, gpus=gpus)
        for w in range(workers):
            block = slots[w * parallel : (w + 1) * parallel]
            own = list(dict.fromkeys(s.cuda_visible_devices or "" for s in block))
            again = split_devices("auto", parallel, per_gpu=per_gpu, gpus=own)
            assert [s.cuda_visible_devices for s in again] == [
                s.cuda_visible_devices for s in block
            ]
        for gpu in gpus:
            assert sum(s.cuda_visible_devices == gpu for s in slots) <= per_gpu


@pytest.mark.parametrize(
    ("slots", "per_gpu", "expected"),
    [
        (split_devices("auto", 4, per_gpu=2, gpus=2), 2,
         "2 per GPU (GPU 0: 2, GPU 1: 2), each with 1/2 of its GPU's memory"),
        (split_devices("auto", 3, per_gpu=4, gpus=2), 4,
         "2 per GPU (GPU 0: 2, GPU 1: 1), each with 1/4 of its GPU's memory"),
        (split_devices("auto", 2, per_gpu=4, gpus=0), 4,
         "on the CPU (trials.per_gpu=4 ignored: no GPU is visible)"),
        (split_devices("cpu", 2, gpus=0), 1, "on the CPU"),
        (split_devices("auto", 2, gpus=4), 1, "2 GPUs per trial (GPU 0,1 | 2,3)"),
    ],
)  # fmt: skip
def test_packing_text_says_how_many_trials_run_on_each_gpu(
    slots: list[Any], per_gpu: int, expected: str
) -> None:
    assert packing_text(slots, per_gpu) == expected
