"""The broken-node rule: which failures are the machine's, and when a worker stops."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from dvt_hpo.recovery.node_health import (
    CGROUP_OOM_REASON,
    NODE_FAILURES,
    broken_node,
    machine_failure,
    machine_retry_limit,
)
from dvt_hpo.spec.model import TrialsSpec


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("RuntimeError: CUDA error: unspecified launch failure", "CUDA launch failure"),
        ("rank 1: RuntimeError: CUDA error: unspecified launch failure", "CUDA launch failure"),
        (
            "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
            "GPU lost",
        ),
        ("RuntimeError: Unable to determine the device handle for GPU0: GPU is lost", "GPU lost"),
        ("RuntimeError: No CUDA GPUs are available", "no CUDA device"),
        (
            "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an "
            "NVIDIA GPU and installed a driver",
            "no CUDA device",
        ),
        ("RuntimeError: CUDA error: no CUDA-capable device is detected", "no CUDA device"),
        ("RuntimeError: CUDA error: invalid device ordinal", "no CUDA device"),
        ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "ECC error"),
        ("RuntimeError: CUDA error: unknown error", "CUDA unknown error"),
        (
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
            "unhandled system error (run with NCCL_DEBUG=INFO for details)",
            "NCCL error",
        ),
        (
            "DistBackendError: NCCL error in: ..., remote process exited or there was a "
            "network error, NCCL version 2.21.5",
            "NCCL error",
        ),
        (f"trial process ended with SIGKILL: {CGROUP_OOM_REASON}", "cgroup out-of-memory kill"),
    ],
)
def test_errors_of_the_machine_are_named(reason: str, kind: str) -> None:
    assert machine_failure(reason) == kind


@pytest.mark.parametrize(
    "reason",
    [
        None,
        "",
        "ValueError: lr=0.3 is too large",
        # The params' or the code's, even though they come from the GPU:
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "RuntimeError: CUDA error: device-side assert triggered",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, invalid usage",
        "timed out after trials.timeout_s=600 s",
        "trial process ended with signal 9 (SIGKILL)",
        "diverged at step 3 (loss=nan)",
    ],
)
def test_other_failures_are_not_the_machines(reason: str | None) -> None:
    assert machine_failure(reason) is None


@dataclass
class Done:
    number: int
    state: str
    reason: str | None = None
    interrupted: bool = False
    machine: str | None = None


CUDA = "RuntimeError: CUDA error: unspecified launch failure"


def machine(number: int, reason: str = CUDA) -> Done:
    kind = machine_failure(reason)
    assert kind is not None
    return Done(number, "FAIL", reason, interrupted=True, machine=kind)


def test_the_default_is_three_in_a_row() -> None:
    assert TrialsSpec().node_failures == NODE_FAILURES == 3


def test_three_machine_failures_in_a_row_at_any_point_stop_the_worker() -> None:
    outcomes = [Done(0, "COMPLETE"), Done(1, "PRUNED"), machine(2), machine(3)]
    assert broken_node(outcomes, 3) is None
    outcomes.append(machine(4))
    broken = broken_node(outcomes, 3)
    assert broken is not None
    assert broken.numbers == (2, 3, 4)
    assert broken.kinds == ("CUDA launch failure",)
    assert broken.reason == CUDA
    line = broken.message("gpu-07")
    assert "\n" not in line
    assert line.startswith("node gpu-07 looks broken, this worker stops: its last 3 trials")
    assert "(2, 3, 4)" in line and CUDA in line and "trials.node_failures" in line


def test_a_dying_gpu_changes_its_message_and_is_still_one_row() -> None:
    outcomes = [
        machine(5),
        machine(6, "RuntimeError: Unable to determine the device handle: GPU is lost"),
        machine(7, "RuntimeError: No CUDA GPUs are available"),
    ]
    broken = broken_node(outcomes, 3)
    assert broken is not None
    assert broken.kinds == ("CUDA launch failure", "GPU lost", "no CUDA device")


@pytest.mark.parametrize(
    "between",
    [
        Done(9, "COMPLETE"),
        Done(9, "PRUNED"),
        Done(9, "FAIL", "ValueError: bad config"),  # a failure of the params ends the row
    ],
)
def test_anything_else_ends_the_row(between: Done) -> None:
    assert broken_node([machine(1), machine(2), between, machine(3), machine(4)], 3) is None


def test_attempts_the_worker_interrupted_are_skipped() -> None:
    stopped = Done(9, "FAIL", "interrupted (the study was stopped)", interrupted=True)
    broken = broken_node([machine(1), stopped, machine(2), stopped, machine(3)], 3)
    assert broken is not None and broken.numbers == (1, 2, 3)


def test_the_threshold_is_the_setting_and_zero_turns_it_off() -> None:
    outcomes = [machine(n) for n in range(5)]
    assert broken_node(outcomes, 0) is None
    assert broken_node(outcomes[:1], 1) is not None
    assert broken_node(outcomes[:4], 5) is None
    broken = broken_node(outcomes, 5)
    assert broken is not None and broken.numbers == (0, 1, 2, 3, 4)


def test_a_config_is_retried_for_the_machine_twice_the_threshold() -> None:
    assert machine_retry_limit(3) == 6
    assert machine_retry_limit(1) == 2


def test_the_reason_named_is_the_first_line_of_the_last() -> None:
    long = CUDA + "\nCUDA kernel errors might be asynchronously reported at some other API call"
    broken = broken_node([machine(1), machine(2), machine(3, long)], 3)
    assert broken is not None and broken.reason == CUDA
