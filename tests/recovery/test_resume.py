"""``trials.resume``: an interrupted trial's retry copy continues where it stopped.

Real workers (``python -m dvt_hpo run``), real trial processes, real SQLite. The first attempt
holds after saving a known epoch (tests/entrypoints/resumable.py), then the worker is stopped
with SIGTERM or killed with SIGKILL, and the next run's copy resumes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from tests.conftest import merge_sections, run_dvt_hpo, toy_study

pytestmark = pytest.mark.processes

HOLD = "tests.entrypoints.resumable"
ROOT = Path(__file__).resolve().parents[2]

BUILTIN_CONFIG: dict[str, Any] = {
    "epochs": 6,
    "seed": 0,
    "deterministic": True,
    "devices": {"device": "cpu", "threads": 1},
    "model": {"builder": "cnn", "kwargs": {"width": 8, "depth": 2, "dropout": 0.2}},
    "data": {"kind": "digits", "batch_size": 64, "val_fraction": 0.2},
    "optim": {"target": "torch.optim.SGD", "optim_args": {"lr": 0.05, "momentum": 0.9}},
    "sched": {"target": "torch.optim.lr_scheduler.CosineAnnealingLR", "step_on": "epoch"},
}


def study_doc(name: str, tmp: Path, **sections: Any) -> dict[str, Any]:
    """A one-trial study with ``trials.resume`` on the built-in trainer held by ``HOLD``."""
    doc = toy_study(
        name,
        study={"storage": f"sqlite:///{tmp / 'study.db'}", "n_trials": 1},
        objective={"metric": "accuracy", "direction": "maximize", "reduce": "last"},
        trials={
            "devices": "cpu",
            "timeout_s": 120,
            "stop_grace_s": 5,
            "max_retries": 1,
            "resume": True,
            "resume_every_s": 0,
            "warm": False,
        },
        trainer={"entrypoint": f"{HOLD}:train", "config": dict(BUILTIN_CONFIG)},
        search_space=[
            {"name": "lr", "path": "optim.optim_args.lr", "kind": "categorical", "choices": [0.05]}
        ],
    )
    return merge_sections(doc, sections)


def write_doc(tmp: Path, doc: dict[str, Any], filename: str = "study.yaml") -> Path:
    path = tmp / filename
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def env_with(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DVT_TEST_HOLD")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def run_cli(path: Path, timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
    return run_dvt_hpo("run", path, cwd=path.parent, env=env_with(), timeout_s=timeout_s)


def wait_for(predicate: Callable[[], Any], proc: subprocess.Popen[str], timeout_s: float) -> None:
    """Poll ``predicate`` (a file the trial writes: no event reaches the test process)."""
    end = time.monotonic() + timeout_s
    while not predicate():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the worker exited {proc.returncode} first:\n{out}\n{err}")
        if time.monotonic() > end:
            proc.kill()
            pytest.fail("timed out waiting for the hold")
        time.sleep(0.05)


def interrupted_run(
    path: Path, hold_at: int, sig: int, while_held: Callable[[], None] | None = None
) -> None:
    """Run the study until its first trial holds after saving step ``hold_at``, then stop
    the worker with ``sig`` (``while_held`` first)."""
    hold_file = path.parent / "held.txt"
    hold_file.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dvt_hpo", "run", str(path)],
        cwd=path.parent,
        env=env_with(DVT_TEST_HOLD_AT=str(hold_at), DVT_TEST_HOLD_FILE=str(hold_file)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(hold_file.exists, proc, 180)
    if while_held is not None:
        while_held()
    proc.send_signal(sig)
    proc.communicate(timeout=60)


def load(path: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{path.parent / 'study.db'}")


def chain_folder(path: Path, name: str, root: int = 0) -> Path:
    return path.parent / "runs" / name / "resume" / f"trial-{root:04d}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> optuna.trial.FrozenTrial:
    """The same trial, uninterrupted and with trials.resume off."""
    tmp = tmp_path_factory.mktemp("reference")
    doc = study_doc("reference", tmp)
    doc["trials"]["resume"] = False
    path = write_doc(tmp, doc)
    done = run_cli(path)
    assert done.returncode == 0, done.stdout + done.stderr
    (trial,) = load(path, "reference").trials
    return trial


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
def test_builtin_trial_resumes_bit_for_bit(
    tmp_path: Path, unique_name: str, reference: optuna.trial.FrozenTrial, sig: int
) -> None:
    path = write_doc(tmp_path, study_doc(unique_name, tmp_path))
    interrupted_run(path, hold_at=2, sig=sig)
    folder = chain_folder(path, unique_name)
    saved = json.loads((folder / "state" / "saved.json").read_text())
    assert saved["step"] == 2 and saved["attempt"] == 0
    first = load(path, unique_name).trials[0]
    if sig == signal.SIGTERM:
        assert first.state.name == "FAIL" and first.user_attrs["status"] == "interrupted"

    done = run_cli(path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resumes from" in done.stdout, done.stdout
    trials = load(path, unique_name).trials
    copy = trials[-1]
    assert copy.state.name == "COMPLETE", copy.user_attrs
    # Bit for bit: the value, and every step of the curve.
    assert copy.value == reference.value
    assert copy.intermediate_values == reference.intermediate_values
    assert sorted(copy.intermediate_values) == list(range(6))
    assert copy.user_attrs["resumed_epochs"] == 3
    assert copy.user_attrs["redone_epochs"] == 0
    # The copy trained epochs 3..5 only.
    stderr = path.parent / "runs" / unique_name / f"trial-{copy.number:04d}" / "stderr.log"
    assert "resuming from the state of trial 0 saved after step 2" in stderr.read_text()
    assert not folder.exists()


def counter_doc(name: str, tmp: Path, **config: Any) -> dict[str, Any]:
    doc = study_doc(name, tmp)
    doc["objective"] = {"metric": "score", "direction": "maximize", "reduce": "last"}
    doc["trainer"] = {
        "entrypoint": f"{HOLD}:counter",
        "config": {"epochs": 5, "log": str(tmp / "starts.txt"), **config},
    }
    doc["search_space"] = [
        {"name": "x", "path": "x", "kind": "float", "low": 0.0, "high": 1.0, "new_key": True}
    ]
    return doc


def starts(tmp: Path) -> list[tuple[int, int]]:
    lines = (tmp / "starts.txt").read_text().split()
    return [(int(a), int(b)) for a, b in zip(lines[::2], lines[1::2], strict=True)]


def expected_curve(x: float, epochs: int) -> dict[int, float]:
    value, curve = 0.0, {}
    for epoch in range(epochs):
        value = value * 0.5 + x
        curve[epoch] = value
    return curve


def test_entry_point_resumes_and_state_goes_at_the_end(tmp_path: Path, unique_name: str) -> None:
    path = write_doc(tmp_path, counter_doc(unique_name, tmp_path))
    shown: list[str] = []

    def status() -> None:
        done = run_dvt_hpo("status", path, cwd=path.parent, env=env_with(), timeout_s=60)
        shown.append(done.stdout)

    interrupted_run(path, hold_at=1, sig=signal.SIGTERM, while_held=status)
    (running,) = [line for line in shown[0].splitlines() if line.startswith("  trial    0")]
    assert "resume state " in running and "B" in running.split("resume state ")[1], shown[0]
    done = run_cli(path)
    assert done.returncode == 0, done.stdout + done.stderr
    first, copy = load(path, unique_name).trials
    assert starts(tmp_path) == [(0, 0), (1, 2)]
    assert copy.intermediate_values == expected_curve(first.params["x"], 5)
    assert copy.value == expected_curve(first.params["x"], 5)[4]
    assert not chain_folder(path, unique_name).exists()


def test_a_trial_that_failed_by_itself_is_not_resumed(tmp_path: Path, unique_name: str) -> None:
    """The failure deletes the state; ``--retry-failed`` then starts from epoch 0."""
    path = write_doc(tmp_path, counter_doc(unique_name, tmp_path, fail_at=2))
    done = run_cli(path)
    assert done.returncode == 1
    assert not chain_folder(path, unique_name).exists()
    # A state planted where the copy would look is not used either.
    planted = chain_folder(path, unique_name) / "state"
    planted.mkdir(parents=True)
    (planted / "state.pt").write_bytes(b"not a state")
    retried = run_dvt_hpo("run", path, "--retry-failed", cwd=tmp_path, env=env_with())
    assert "failed by itself" in retried.stdout, retried.stdout
    assert starts(tmp_path) == [(0, 0), (1, 0)]
    assert not chain_folder(path, unique_name).exists()


def test_retries_used_up_delete_the_state(tmp_path: Path, unique_name: str) -> None:
    doc = counter_doc(unique_name, tmp_path)
    doc["trials"]["max_retries"] = 0
    path = write_doc(tmp_path, doc)
    interrupted_run(path, hold_at=1, sig=signal.SIGTERM)
    (trial,) = load(path, unique_name).trials
    assert trial.state.name == "FAIL"
    assert not chain_folder(path, unique_name).exists()


def test_pruned_trial_deletes_the_state(tmp_path: Path, unique_name: str) -> None:
    doc = counter_doc(unique_name, tmp_path)
    doc["study"]["pruner"] = {"kind": "threshold", "upper": 0.0, "n_warmup_steps": 1}
    path = write_doc(tmp_path, doc)
    run_cli(path)
    (trial,) = load(path, unique_name).trials
    assert trial.state.name == "PRUNED"
    assert not chain_folder(path, unique_name).exists()


def test_state_of_other_params_is_never_loaded(tmp_path: Path, unique_name: str) -> None:
    """A study file changed between the interruption and the retry (other trainer config):
    the copy starts from epoch 0 and says why."""
    path = write_doc(tmp_path, counter_doc(unique_name, tmp_path))
    interrupted_run(path, hold_at=1, sig=signal.SIGTERM)
    assert (chain_folder(path, unique_name) / "state" / "state.pt").exists()
    changed = counter_doc(unique_name, tmp_path, epochs=4)
    write_doc(tmp_path, changed)
    done = run_cli(path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "written with other params, trainer config or search space" in done.stdout
    assert starts(tmp_path) == [(0, 0), (1, 0)]


def test_command_trainer_resumes(tmp_path: Path, unique_name: str) -> None:
    doc = counter_doc(unique_name, tmp_path)
    doc["trainer"] = {
        "command": [
            "{python}",
            str(ROOT / "tests" / "entrypoints" / "cmd_resume.py"),
            "--x={x}",
            "--resume-dir={resume_dir}",
            "--trial={trial_number}",
            f"--log={tmp_path / 'starts.txt'}",
        ],
        "config": {"x": 0.5},
    }
    path = write_doc(tmp_path, doc)
    interrupted_run(path, hold_at=2, sig=signal.SIGTERM)
    done = run_cli(path)
    assert done.returncode == 0, done.stdout + done.stderr
    first, copy = load(path, unique_name).trials
    assert starts(tmp_path) == [(0, 0), (1, 3)]
    assert copy.intermediate_values == expected_curve(first.params["x"], 5)
    assert copy.user_attrs["resumed_epochs"] == 3
    assert not chain_folder(path, unique_name).exists()


DDP = {"launcher": "torchrun", "nproc_per_node": 2, "warm": False}


def ddp_doc(name: str, tmp: Path, *, resume: bool) -> dict[str, Any]:
    doc = study_doc(name, tmp)
    doc["trials"].update(DDP, resume=resume)
    doc["batch_size"] = {"auto": True, "min": 8, "max": 32}
    doc["trainer"]["config"]["data"] = {"kind": "digits", "max_samples": 400, "batch_size": 16}
    return doc


def test_ddp_trial_resumes_bit_for_bit(tmp_path: Path, unique_name: str) -> None:
    """Two gloo ranks: rank 0 writes the state, both load it; the copy keeps the batch size
    found by the first attempt (no new search) and ends with the uninterrupted value."""
    ref_dir = tmp_path / "reference"
    ref_dir.mkdir()
    ref_path = write_doc(ref_dir, ddp_doc("reference", ref_dir, resume=False))
    done = run_cli(ref_path)
    assert done.returncode == 0, done.stdout + done.stderr
    (reference,) = load(ref_path, "reference").trials

    path = write_doc(tmp_path, ddp_doc(unique_name, tmp_path, resume=True))
    interrupted_run(path, hold_at=2, sig=signal.SIGTERM)
    done = run_cli(path)
    assert done.returncode == 0, done.stdout + done.stderr
    first, copy = load(path, unique_name).trials
    assert copy.state.name == "COMPLETE", copy.user_attrs
    assert copy.value == reference.value
    assert copy.intermediate_values == reference.intermediate_values
    assert copy.user_attrs["resumed_epochs"] == 3
    assert copy.user_attrs["batch_size"] == first.user_attrs["batch_size"]
    assert copy.user_attrs["batch_size_cache"] == first.user_attrs["batch_size_cache"] == "miss"
    assert not chain_folder(path, unique_name).exists()
