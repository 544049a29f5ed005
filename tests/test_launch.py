"""Command lines, environments, device slots and process groups of trial processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dvt_hpo.exceptions import SpecError
from dvt_hpo.launch import (
    Slot,
    TrialProcess,
    build_command,
    describe_exit,
    free_port,
    group_members,
    pid_alive,
    split_devices,
    tail_lines,
    trial_env,
    visible_gpus,
)

# -- command lines -----------------------------------------------------------------------


def test_build_command_process() -> None:
    argv = build_command("process", Path("/t/payload.json"), python="/py")
    assert argv == ["/py", "-m", "dvt_hpo.worker", "/t/payload.json"]
    with pytest.raises(ValueError, match="needs launcher 'torchrun'"):
        build_command("process", "p.json", nproc_per_node=2)
    with pytest.raises(ValueError, match="launcher must be"):
        build_command("slurm", "p.json")


def test_build_command_torchrun_standalone_and_fixed_port() -> None:
    standalone = build_command("torchrun", "p.json", nproc_per_node=4, python="/py")
    assert standalone[:3] == ["/py", "-m", "torch.distributed.run"]
    assert "--standalone" in standalone
    assert "--nproc-per-node=4" in standalone and "--max-restarts=0" in standalone
    assert standalone[-3:] == ["-m", "dvt_hpo.worker", "p.json"]
    fixed = build_command("torchrun", "p.json", nproc_per_node=2, rdzv_port=29555)
    assert "--standalone" not in fixed
    assert "--rdzv-backend=c10d" in fixed and "--rdzv-endpoint=127.0.0.1:29555" in fixed
    with pytest.raises(ValueError, match="rdzv_port"):
        build_command("torchrun", "p.json", rdzv_port=70000)


def test_free_port_is_bindable() -> None:
    import socket

    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


# -- exits and logs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (0, "exit code 0"),
        (3, "exit code 3"),
        (-11, "killed by signal SIGSEGV (-11)"),
        (-9, "killed by signal SIGKILL (-9)"),
        (137, "exit code 137 (128+SIGKILL)"),
        (143, "exit code 143 (128+SIGTERM)"),
        (255, "exit code 255"),
        (None, "still running"),
    ],
)
def test_describe_exit(code: int | None, text: str) -> None:
    assert describe_exit(code) == text


def test_tail_lines(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_text("".join(f"line {i} {'x' * 500}\n" for i in range(200)))
    tail = tail_lines(path, 3).splitlines()
    assert [line.split()[1] for line in tail] == ["197", "198", "199"]
    assert tail_lines(tmp_path / "missing.log") == ""
    (tmp_path / "short.log").write_bytes(b"one\ntwo \xff\n")
    assert tail_lines(tmp_path / "short.log", 50) == "one\ntwo \ufffd"


# -- device slots ---------------------------------------------------------------------------


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
        ([1, 3], 1, 2, 4, [("1,3", 4)]),
        ("0,1", 2, 1, 2, [("0", 4), ("1", 4)]),
        ("cuda:2", 1, 1, 4, [("2", 8)]),
        ("cuda:0,1", 1, 1, 2, [("0,1", 8)]),
        (["cuda:1"], 1, 1, 2, [("1", 8)]),
        ("cuda", 2, 2, 4, [("0,1", 2), ("2,3", 2)]),
        ("auto", 1, 1, ["GPU-a", "GPU-b"], [("GPU-a,GPU-b", 8)]),
        ([1], 1, 1, ["4", "6"], [("6", 8)]),  # indexes into CUDA_VISIBLE_DEVICES
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
        ([0, 5], 1, 1, 2, "GPU index 5 is not visible"),
        ([0, 0], 1, 1, 2, "twice"),
        ("0,1", 3, 1, 4, "trials.parallel=3 needs at least one"),
        ("auto", 2, 2, 2, "trials.nproc_per_node=2 needs one per process"),
        ("tpu", 1, 1, 2, "must be 'auto', 'cpu'"),
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


def test_the_process_boundary_never_imports_torch() -> None:
    code = (
        "import sys\n"
        "import dvt_hpo.context, dvt_hpo.launch, dvt_hpo.protocol, dvt_hpo.worker\n"
        "dvt_hpo.launch.split_devices('auto', 1)\n"
        "heavy = sorted(m for m in ('torch', 'numpy', 'optuna') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_trial_env() -> None:
    base = {
        "PATH": "/bin",
        "RANK": "3",
        "LOCAL_RANK": "1",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": "x",
        "DVT_HPO_MEMORY_LIMIT": "5",
    }
    env = trial_env(base, Slot(0, "1", 2), "/tmp/dvt-x/c.sock", None)
    assert env["DVT_HPO_CONTROL"] == "/tmp/dvt-x/c.sock"
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["OMP_NUM_THREADS"] == "2"
    assert env["PATH"] == "/bin" and env["PYTHONUNBUFFERED"] == "1"
    for name in (
        "RANK",
        "LOCAL_RANK",
        "MASTER_PORT",
        "TORCHELASTIC_RUN_ID",
        "DVT_HPO_MEMORY_LIMIT",
    ):
        assert name not in env
    env = trial_env({"OMP_NUM_THREADS": "8"}, Slot(0, None, 2), "/s", 1 << 30)
    assert env["DVT_HPO_MEMORY_LIMIT"] == str(1 << 30)
    assert env["OMP_NUM_THREADS"] == "8"  # the user's explicit choice wins
    assert "CUDA_VISIBLE_DEVICES" not in env


# -- process groups ----------------------------------------------------------------------------


@pytest.fixture
def start_script(tmp_path: Path) -> Callable[[str], tuple[TrialProcess, Callable[[], str]]]:
    """Start a Python script as a trial process; ``ready()`` reads the line it writes to the
    FIFO at $READY (blocking until it does: no polling)."""
    fifo = tmp_path / "ready.fifo"
    os.mkfifo(fifo)
    started: list[TrialProcess] = []

    def start(body: str) -> tuple[TrialProcess, Callable[[], str]]:
        process = TrialProcess.start(
            [sys.executable, "-c", textwrap.dedent(body)],
            env={**os.environ, "READY": str(fifo)},
            cwd=tmp_path,
            stdout_path=tmp_path / "stdout.log",
            stderr_path=tmp_path / "stderr.log",
        )
        started.append(process)

        def ready() -> str:
            with open(fifo) as f:
                return f.readline().strip()

        return process, ready

    yield start  # type: ignore[misc]
    for process in started:
        if process.poll() is None:
            process.stop(0)


READY = """
import os, signal, subprocess, sys, time
def ready(text=""):
    with open(os.environ["READY"], "w") as f:
        f.write(f"{text}\\n")
"""


def test_wait_times_out_then_stop_terminates(start_script: Any, tmp_path: Path) -> None:
    process, ready = start_script(READY + "print('hi', flush=True)\nready()\ntime.sleep(60)\n")
    ready()
    assert process.wait(0.05) is None and process.poll() is None
    outcome = process.stop(5)
    assert (outcome.how, outcome.returncode, outcome.all_gone) == ("terminated", -15, True)
    assert outcome.seconds < 5 and process.returncode == -15
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pgid, 0)
    assert (tmp_path / "stdout.log").read_text() == "hi\n"


def test_stop_escalates_to_sigkill_when_sigterm_is_ignored(start_script: Any) -> None:
    process, ready = start_script(
        READY + "signal.signal(signal.SIGTERM, signal.SIG_IGN)\nready()\ntime.sleep(60)\n"
    )
    ready()
    outcome = process.stop(0.3)
    assert (outcome.how, outcome.returncode) == ("killed", -int(signal.SIGKILL))
    assert 0.3 <= outcome.seconds < 5


def test_leftovers_of_the_group_die_with_the_leader(start_script: Any) -> None:
    process, ready = start_script(
        READY
        + """
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
ready(child.pid)
"""
    )
    child = int(ready())
    assert process.wait(10) == 0
    assert not pid_alive(child)
    assert group_members(process.pgid) == []


def test_stop_reaches_descendants_in_their_own_sessions(start_script: Any) -> None:
    # What torchrun does with its ranks: each in a new session, out of the leader's group.
    process, ready = start_script(
        READY
        + """
child = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
)
ready(child.pid)
time.sleep(60)
"""
    )
    child = int(ready())
    assert os.getpgid(child) == child != process.pgid
    outcome = process.stop(5)
    assert outcome.all_gone and not pid_alive(child)


def test_stop_kills_extra_pids(start_script: Any) -> None:
    process, ready = start_script(READY + "ready()\ntime.sleep(60)\n")
    ready()
    stranger = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        process.stop(5, extra_pids=[stranger.pid])
        assert stranger.wait(10) == -15
    finally:
        if stranger.poll() is None:
            stranger.kill()
            stranger.wait()


def test_stop_after_exit_reports_exited(start_script: Any) -> None:
    process, ready = start_script(READY + "ready()\nsys.exit(5)\n")
    ready()
    assert process.wait(10) == 5
    outcome = process.stop(5)
    assert (outcome.how, outcome.returncode) == ("exited", 5)
