"""Section trials: launcher, devices, limits, runs folder."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from dvt_hpo.studyfile import (
    load_spec,
)
from tests.studyfile.helpers import (
    BASE,
    bad_file_test,
    case,
)


def test_trials_and_batch_size_options(write: Callable[..., Path], tmp_path: Path) -> None:
    text = BASE + textwrap.dedent(
        """\
        trials:
          launcher: torchrun
          nproc_per_node: 2
          devices: [2, 3]
          stop_grace_s: 0
          max_retries: 0
          memory_limit: 512MiB
          report_timeout_s: 5
          runs_dir: out/runs
        batch_size:
          auto: true
          min: 4
          max: 64
          start: 16
          multiple_of: 4
          tolerance: 0.5
          effective: 128
        """
    )
    spec = load_spec(write(text))
    assert spec.trials.launcher == "torchrun" and spec.trials.nproc_per_node == 2
    assert spec.trials.devices == (2, 3)
    assert spec.trials.memory_limit == 512 * 1024**2
    assert spec.trials.runs_dir == tmp_path.resolve() / "out" / "runs"
    assert spec.batch_size.effective == 128 and spec.batch_size.start == 16


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("auto", "auto"),
        ("cpu", "cpu"),
        ("cuda", "cuda"),
        ("GPU", "cuda"),
        ("2", 2),
        ("[0, 1]", (0, 1)),
        ('"0,1"', (0, 1)),
        ('"cuda:0,1"', (0, 1)),
        ('"cuda:2"', (2,)),
        ('" CUDA:3 "', (3,)),
        ('"1"', (1,)),
    ],
)
def test_devices_forms_are_normalized(
    write: Callable[..., Path], value: str, expected: object
) -> None:
    spec = load_spec(write(BASE + f"trials: {{devices: {value}}}\n"))
    assert spec.trials.devices == expected


# fmt: off
BAD_TRIALS = [
    case("nproc-needs-torchrun", BASE + "trials:\n  nproc_per_node: 2\n", 8,
         "trials.nproc_per_node", "needs launcher: torchrun"),
    case("nproc-more-than-devices",
         BASE + "trials: {launcher: torchrun, nproc_per_node: 4, devices: [0, 1]}\n", 7,
         "trials.nproc_per_node", "needs at least 4 GPUs", "lists 2"),
    case("devices-zero", BASE + "trials:\n  devices: 0\n", 8, "trials.devices",
         "GPU count must be >= 1, got 0", "[0] or 'cuda:0'"),
    case("devices-garbage", BASE + "trials:\n  devices: gpu0\n", 8, "trials.devices",
         "'0,1', 'cuda:0,1' or 'cuda:2'", "got 'gpu0'"),
    case("devices-duplicate", BASE + "trials:\n  devices: [0, 0]\n", 8, "trials.devices",
         "distinct"),
    case("devices-negative-id", BASE + "trials:\n  devices:\n    - 0\n    - -1\n", 10,
         "trials.devices[1]", "integers >= 0, got -1"),
    case("memory-garbage", BASE + "trials:\n  memory_limit: 4 gigs\n", 8, "trials.memory_limit",
         "unknown size unit 'gigs'", "GiB"),
    case("memory-tiny", BASE + "trials:\n  memory_limit: 4096\n", 8, "trials.memory_limit",
         "at least 16MiB", "4096"),
    case("stop-grace-negative", BASE + "trials: {stop_grace_s: -1}\n", 7, "trials.stop_grace_s",
         ">= 0", "-1"),
]
# fmt: on


test_bad_trials = bad_file_test(BAD_TRIALS)
