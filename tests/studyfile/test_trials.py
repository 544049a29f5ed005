"""Section trials: launcher, devices, limits, runs folder."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from dvt_hpo.exceptions import SpecError
from dvt_hpo.run.preflight import load_runnable
from dvt_hpo.studyfile import (
    load_spec,
)
from tests.studyfile.helpers import (
    BASE,
    bad_file_test,
    case,
    study_with,
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
    # trials.resume is off by default; its interval defaults to 60 s.
    assert spec.trials.resume is False and spec.trials.resume_every_s == 60.0


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
    case("resume-not-bool", BASE + "trials: {resume: maybe}\n", 7, "trials.resume", "maybe"),
    case("resume-every-negative", BASE + "trials: {resume: true, resume_every_s: -5}\n", 7,
         "trials.resume_every_s", ">= 0", "-5"),
]
# fmt: on


test_bad_trials = bad_file_test(BAD_TRIALS)


# -- trials.per_gpu ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("trials", "visible", "parallel"),
    [
        ("{per_gpu: 2, devices: [0, 1]}", None, 4),  # every share: 2 GPUs x 2
        ("{per_gpu: 3, devices: 2}", None, 6),
        ("{per_gpu: 4}", "0,1", 8),  # auto: the GPUs visible here
        ("{per_gpu: 4, devices: cuda}", "3", 4),
        ("{per_gpu: 4}", "", 4),  # none visible: as many at once on the CPU as on one GPU
        ("{per_gpu: 4, parallel: 3}", "0,1", 3),  # written: kept
        ("{devices: [0, 1]}", None, 1),  # without per_gpu the default stays 1
    ],
)
def test_parallel_defaults_to_every_share_with_per_gpu(
    write: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    trials: str,
    visible: str | None,
    parallel: int,
) -> None:
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    spec = load_spec(write(BASE + f"trials: {trials}\n"))
    assert spec.trials.parallel == parallel
    assert spec.trials.per_gpu == (1 if "per_gpu" not in trials else int(trials[10]))
    # TPE's constant liar follows from several trials at once, however parallel was set.
    tpe = BASE.replace("  name: s\n", "  name: s\n  sampler: tpe\n")
    spec = load_spec(write(tpe + f"trials: {trials}\n"))
    liar = spec.study.sampler.kwargs.get("constant_liar", False)
    assert liar is (parallel > 1)


COMMAND_BASE = """\
study:
  name: s
trainer:
  command: ["{python}", train.py, "--lr={lr}"]
search_space:
  - {name: lr, path: lr, kind: float, low: 1.0e-4, high: 0.1, log: true}
"""

# fmt: off
BAD_PER_GPU = [
    case("per-gpu-zero", BASE + "trials:\n  per_gpu: 0\n", 8, "trials.per_gpu",
         "integer >= 1, got 0"),
    case("per-gpu-cpu", BASE + "trials:\n  devices: cpu\n  per_gpu: 2\n", 9, "trials.per_gpu",
         "devices is cpu: there is no GPU to share", "write trials.parallel"),
    case("per-gpu-ddp",
         BASE + "trials:\n  launcher: torchrun\n  nproc_per_node: 2\n  per_gpu: 2\n", 10,
         "trials.per_gpu", "one process each", "nproc_per_node=2 spreads a trial over 2 GPUs",
         "use per_gpu: 1 with nproc_per_node > 1"),
    case("per-gpu-command", COMMAND_BASE + "trials:\n  per_gpu: 2\n", 8, "trials.per_gpu",
         "enforces for a Python entry point", "trainer.command runs a script outside it"),
    case("per-gpu-override-cpu", BASE + "trials: {per_gpu: 2}\n", 7, "trials.per_gpu",
         "no GPU to share", overrides=["trials.devices=cpu"]),
]
# fmt: on

test_bad_per_gpu = bad_file_test(BAD_PER_GPU)


def test_too_many_trials_for_the_shares_is_refused_at_parallel(
    write: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    path = write(BASE + "trials:\n  per_gpu: 2\n  parallel: 3\n")
    load_spec(path)  # a valid file: only running it needs the GPUs
    with pytest.raises(SpecError) as info:
        load_runnable(path)
    assert (info.value.line, info.value.field) == (9, "trials.parallel")
    assert "selects 1 GPU(s) (0) x trials.per_gpu=2 = 2 trial slot(s)" in info.value.message


def test_node_failures_is_read_and_refused_below_zero(write: Callable[..., Path]) -> None:
    assert load_spec(write(BASE)).trials.node_failures == 3
    spec = load_spec(write(BASE + "trials:\n  node_failures: 0\n"))
    assert spec.trials.node_failures == 0
    with pytest.raises(SpecError, match="node_failures") as err:
        load_spec(write(BASE + "trials:\n  node_failures: -1\n"))
    assert "study.yaml" in str(err.value)


def test_pause_turns_resume_on_and_is_refused_where_nothing_would_pause(
    write: Callable[..., Path],
) -> None:
    pruned = study_with("  pruner: {kind: successive_halving}")
    spec = load_spec(write(pruned + "trials:\n  pause: true\n  paused_max: 4\n"))
    assert (spec.trials.pause, spec.trials.resume, spec.trials.paused_max) == (True, True, 4)
    assert not load_spec(write(BASE)).trials.pause
    with pytest.raises(SpecError, match=r"resume=false, but pause=true") as err:
        load_spec(write(pruned + "trials:\n  pause: true\n  resume: false\n"))
    assert "trials.resume" in str(err.value)
    # The default for short curves has no pruner: nothing would ever be paused.
    with pytest.raises(SpecError, match=r"study.pruner is none"):
        load_spec(write(BASE + "trials:\n  pause: true\n"))
    with pytest.raises(SpecError, match="paused_max_gb"):
        load_spec(write(pruned + "trials:\n  pause: true\n  paused_max_gb: 0\n"))
