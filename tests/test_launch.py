"""The trial command line, environment and log tails (dvt_hpo.launch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dvt_hpo.devices import Slot
from dvt_hpo.launch import build_command, free_port, tail_lines, trial_env
from tests.conftest import REPO_ROOT

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


def test_tail_lines(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_text("".join(f"line {i} {'x' * 500}\n" for i in range(200)))
    tail = tail_lines(path, 3).splitlines()
    assert [line.split()[1] for line in tail] == ["197", "198", "199"]
    assert tail_lines(tmp_path / "missing.log") == ""
    (tmp_path / "short.log").write_bytes(b"one\ntwo \xff\n")
    assert tail_lines(tmp_path / "short.log", 50) == "one\ntwo \ufffd"


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


@pytest.mark.processes
def test_the_process_boundary_never_imports_torch() -> None:
    code = (
        "import sys\n"
        "import dvt_hpo.context, dvt_hpo.launch, dvt_hpo.protocol, dvt_hpo.worker\n"
        "import dvt_hpo.control_client, dvt_hpo.payload, dvt_hpo.devices\n"
        "dvt_hpo.devices.split_devices('auto', 1)\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.processes
@pytest.mark.xfail(
    not (REPO_ROOT / "dvt_hpo" / "spec").is_dir(),
    reason="dvt_hpo.spec is still the one-module loader that imports optuna; the spec package "
    "(dvt_hpo.spec.model, stdlib only) makes the trial process optuna-free",
    strict=True,
)
def test_the_trial_process_never_imports_optuna_or_numpy() -> None:
    code = (
        "import sys\n"
        "import dvt_hpo.worker, dvt_hpo.payload\n"
        "heavy = sorted(m for m in ('optuna', 'numpy') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
