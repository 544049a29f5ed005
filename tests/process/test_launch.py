"""The trial command line, environment and log tails (dvt_hpo.process.launch)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dvt_hpo.devices.slots import Slot
from dvt_hpo.process.launch import build_command, free_port, tail_lines, trial_env
from tests.conftest import toy_study

# -- command lines -----------------------------------------------------------------------


def test_build_command_process() -> None:
    argv = build_command("process", Path("/t/payload.json"), python="/py")
    assert argv == ["/py", "-m", "dvt_hpo.trial", "/t/payload.json"]
    with pytest.raises(ValueError, match="needs launcher 'torchrun'"):
        build_command("process", "p.json", nproc_per_node=2)
    with pytest.raises(ValueError, match="launcher must be"):
        build_command("slurm", "p.json")


def test_build_command_torchrun_standalone_and_fixed_port() -> None:
    standalone = build_command("torchrun", "p.json", nproc_per_node=4, python="/py")
    assert standalone[:3] == ["/py", "-m", "torch.distributed.run"]
    assert "--standalone" in standalone
    assert "--nproc-per-node=4" in standalone and "--max-restarts=0" in standalone
    assert standalone[-3:] == ["-m", "dvt_hpo.trial", "p.json"]
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
def _launcher(tmp_path: Path, **kwargs: Any) -> Any:
    from dvt_hpo.process.launch import Launcher

    return Launcher(
        launcher="process",
        nproc_per_node=1,
        preload=[],
        base_env={},
        cwd=tmp_path,
        log_path=tmp_path / "warm.log",
        log_limit=None,
        out=lambda line: None,
        **kwargs,
    )


def test_warm_starts_are_off_on_macos_and_said_when_the_run_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _launcher(tmp_path, warm=True).warm
    assert _launcher(tmp_path, warm=True).notes == []
    monkeypatch.setattr(sys, "platform", "darwin")
    launcher = _launcher(tmp_path, warm=True)
    assert not launcher.warm
    assert launcher.notes == ["warm starts off on macOS (trials.warm): each trial starts cold"]
    assert _launcher(tmp_path, warm=False).notes == []  # nothing turned off: nothing said


def test_the_process_boundary_never_imports_torch() -> None:
    code = (
        "import sys\n"
        "import dvt_hpo.trial.context, dvt_hpo.process.launch, dvt_hpo.wire.protocol, dvt_hpo.trial.main\n"
        "import dvt_hpo.wire.control_client, dvt_hpo.wire.payload, dvt_hpo.devices.slots\n"
        "dvt_hpo.devices.slots.split_devices('auto', 1)\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.processes
def test_the_trial_process_never_imports_optuna_or_numpy() -> None:
    code = (
        "import sys\n"
        "import dvt_hpo.trial.main, dvt_hpo.wire.payload\n"
        "heavy = sorted(m for m in ('optuna', 'numpy') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- warm starts, bounded logs, log retention (real studies) ------------------------------

EDITED_TRAINER = """
from pathlib import Path

VERSION = {version}


def run(config, ctx):
    if VERSION == 1:
        # Trial 0 edits this very module: the next trial must run the new code. The edit
        # changes the file's size: an edit of the same size within the second of the file's
        # last write would pass Python's own byte-code check (whole-second mtime and size)
        # and import the cached old code, whatever the template does.
        path = Path(__file__)
        path.write_text(path.read_text().replace("VERSION = 1", "VERSION = 2  # edited"))
    ctx.report(0, {{"score": float(VERSION)}})
    return {{"score": float(VERSION)}}
"""


def _run(study: Path) -> tuple[list[Any], list[str]]:
    import optuna

    from dvt_hpo.exceptions import StudyStopped
    from dvt_hpo.study.loop import StudyRunner
    from dvt_hpo.studyfile import load_spec

    lines: list[str] = []
    runner = StudyRunner(load_spec(study), out=lines.append)
    try:
        result = runner.run()
    except StudyStopped as exc:
        # A run whose trials all failed exits 1; these tests read the failed trials.
        assert str(exc).startswith("no trial of this run succeeded"), exc
        result = runner.study
    trials: list[optuna.trial.FrozenTrial] = sorted(result.trials, key=lambda t: t.number)
    return trials, lines


@pytest.mark.processes
def test_a_module_edited_between_trials_is_seen_by_the_next_warm_trial(
    tmp_path: Path, write_study: Callable[..., Path], unique_name: str
) -> None:
    (tmp_path / "edited_trainer.py").write_text(EDITED_TRAINER.format(version=1))
    doc = toy_study(unique_name, trainer={"entrypoint": "edited_trainer:run", "config": {}})
    trials, lines = _run(write_study(doc))
    assert [t.value for t in trials] == [1.0, 2.0]
    assert all(t.user_attrs.get("warm_start") for t in trials)
    assert any(
        "restarting the warm template" in line and "edited_trainer.py" in line for line in lines
    )


# The trainer imports helper, then (once, or on every import) rewrites helper's file: a
# template that imported helper before the write may hold its old version.
REWRITING_TRAINER = """
from pathlib import Path

import helper

marker = Path(__file__).with_name("rewritten")
if {every_import} or not marker.exists():
    marker.touch()
    Path(helper.__file__).write_text("VERSION = 2\\n")


def run(config, ctx):
    ctx.report(0, {{"score": float(helper.VERSION)}})
    return {{"score": float(helper.VERSION)}}
"""


@pytest.mark.processes
def test_a_module_written_while_the_template_imports_it_is_not_served_old(
    tmp_path: Path, write_study: Callable[..., Path], unique_name: str
) -> None:
    (tmp_path / "helper.py").write_text("VERSION = 1\n")
    (tmp_path / "rewriting_trainer.py").write_text(REWRITING_TRAINER.format(every_import=False))
    doc = toy_study(unique_name, trainer={"entrypoint": "rewriting_trainer:run", "config": {}})
    trials, lines = _run(write_study(doc))
    assert [t.value for t in trials] == [2.0, 2.0]
    assert all(t.user_attrs.get("warm_start") for t in trials)
    assert any(
        "restarting the warm template" in line and "while the warm template imported it" in line
        for line in lines
    ), lines


@pytest.mark.processes
def test_a_module_written_on_every_import_turns_warm_starts_off(
    tmp_path: Path, write_study: Callable[..., Path], unique_name: str
) -> None:
    (tmp_path / "helper.py").write_text("VERSION = 1\n")
    (tmp_path / "rewriting_trainer.py").write_text(REWRITING_TRAINER.format(every_import=True))
    doc = toy_study(unique_name, trainer={"entrypoint": "rewriting_trainer:run", "config": {}})
    doc["study"]["n_trials"] = 1
    trials, lines = _run(write_study(doc))
    assert [t.state.name for t in trials] == ["COMPLETE"]
    assert not trials[0].user_attrs.get("warm_start")
    assert any(
        line.startswith("warm starts off for this run:") and "helper.py" in line for line in lines
    ), lines


@pytest.mark.processes
def test_an_import_error_in_the_template_turns_warm_off_and_the_trial_fails_with_it(
    tmp_path: Path, write_study: Callable[..., Path], unique_name: str
) -> None:
    (tmp_path / "broken_trainer.py").write_text("import no_such_module_xyz\n")
    doc = toy_study(unique_name, trainer={"entrypoint": "broken_trainer:run", "config": {}})
    doc["study"]["n_trials"] = 1
    trials, lines = _run(write_study(doc))
    assert trials[0].state.name == "FAIL"
    assert "no_such_module_xyz" in trials[0].user_attrs["reason"]
    assert "warm_start" not in trials[0].user_attrs
    assert sum("warm starts off for this run" in line for line in lines) == 1


@pytest.mark.processes
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_a_chatty_trial_log_keeps_its_beginning_and_end(
    write_study: Callable[..., Path], unique_name: str, warm: bool
) -> None:
    actions = [
        {"do": "print", "text": "FIRST LINE"},
        {"do": "print", "text": "x" * 99, "times": 30_000},  # 3 MB
        {"do": "print", "text": "LAST LINE"},
        {"do": "curve", "values": [0.5]},
    ]
    doc = toy_study(unique_name, trials={"log_limit": "64KiB", "warm": warm})
    doc["trainer"]["config"]["actions"] = actions
    doc["study"]["n_trials"] = 1
    (trial,), _ = _run(write_study(doc))
    assert trial.state.name == "COMPLETE"
    log = Path(trial.user_attrs["log_dir"], "stdout.log").read_text()
    assert len(log) < 64 * 1024 + 200
    assert log.startswith("FIRST LINE") and log.rstrip().endswith("LAST LINE")
    assert "dropped here" in log


@pytest.mark.processes
@pytest.mark.parametrize(("keep", "kept"), [("all", {0, 1}), ("failed", {1}), ("none", set())])
def test_keep_logs_removes_the_folders_of_finished_trials(
    write_study: Callable[..., Path], unique_name: str, keep: str, kept: set[int]
) -> None:
    doc = toy_study(unique_name, trials={"keep_logs": keep})
    doc["trainer"]["entrypoint"] = "tests.entrypoints.switch:run"
    doc["trainer"]["config"] = {
        "fault": False,
        "fault_actions": [{"do": "raise", "message": "boom"}],
        "actions": [{"do": "curve", "values": [0.5]}],
    }
    doc["search_space"] = [
        {"name": "fault", "path": "fault", "kind": "categorical", "choices": [False, True]}
    ]
    study = write_study(doc)
    import optuna

    from dvt_hpo.studyfile import load_spec

    spec = load_spec(study)
    created = optuna.create_study(
        storage=spec.study.storage, study_name=unique_name, direction="maximize"
    )
    created.enqueue_trial({"fault": False})
    created.enqueue_trial({"fault": True})
    trials, _ = _run(study)
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL"]
    on_disk = {
        t.number for t in trials if (spec.trials.runs_dir / f"trial-{t.number:04d}").exists()
    }
    assert on_disk == kept
    assert "boom" in trials[1].user_attrs["stderr_tail"]  # the traceback reached stderr.log
