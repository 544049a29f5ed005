"""A worker on a broken node stops itself; the healthy one finishes the study.

Two real ``dvt-hpo run`` processes on one study (SQLite, PostgreSQL); one of them has a GPU that
"breaks" after its first trial (tests/entrypoints/broken_node.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest

from dvt_hpo.recovery import retries
from dvt_hpo.recovery.stopped_nodes import stopped_nodes
from dvt_hpo.store.storage import MACHINE_ATTR
from dvt_hpo.studyfile import load_spec
from tests.conftest import REPO_ROOT, run_dvt_hpo, toy_study
from tests.entrypoints.broken_node import BROKEN_ENV, BROKEN_HANG_ENV

BROKEN_ENTRYPOINT = "tests.entrypoints.broken_node:run"
N_TRIALS = 14
RUN_TIMEOUT_S = 300


def broken_study(name: str, storage: str, **sections: Any) -> dict[str, Any]:
    return toy_study(
        name,
        study={"n_trials": N_TRIALS, "storage": storage, **sections.pop("study", {})},
        trainer={
            "entrypoint": BROKEN_ENTRYPOINT,
            "config": {"curve": [0.1, 0.2, 0.3], "sleep_s": 0.3},
        },
        **sections,
    )


def dvt_hpo(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dvt_hpo", *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def load(study_file: Path) -> tuple[optuna.Study, Any]:
    spec = load_spec(study_file)
    study = optuna.load_study(study_name=spec.study.name, storage=spec.study.storage)
    return study, spec


def two_workers(
    study_file: Path, tmp_path: Path, *, hang: bool = False
) -> tuple[tuple[int, str], tuple[int, str]]:
    """(exit code, stdout + stderr) of the healthy worker and of the broken one; ``hang``: the
    broken one runs 2 trials at once and its second trial hangs until it is ended."""
    broken_env = {**os.environ, BROKEN_ENV: str(tmp_path / "gpu-broke")}
    sets: tuple[str, ...] = ()
    if hang:
        broken_env[BROKEN_HANG_ENV] = "1"
        sets = ("--set", "trials.parallel=2")
    healthy = dvt_hpo("run", str(study_file))
    broken = dvt_hpo("run", str(study_file), *sets, env=broken_env)
    results = []
    for proc in (healthy, broken):
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
        results.append((proc.returncode, out + err))
    return results[0], results[1]


def check_study_after_a_broken_node(
    study_file: Path, tmp_path: Path, *, hang: bool = False
) -> None:
    (healthy_code, healthy_out), (broken_code, broken_out) = two_workers(
        study_file, tmp_path, hang=hang
    )
    host = socket.gethostname()
    assert (tmp_path / "gpu-broke").exists(), broken_out  # its first trial ran there
    assert broken_code == 1, broken_out
    errors = [line for line in broken_out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, broken_out
    assert errors[0].startswith(f"error: node {host} looks broken, this worker stops"), errors
    assert "CUDA error: unspecified launch failure" in errors[0]
    assert "Traceback" not in broken_out
    assert healthy_code == 0, healthy_out

    study, spec = load(study_file)
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    failed = [t for t in trials if t.state.name == "FAIL"]
    assert len(complete) == N_TRIALS, [(t.number, t.state.name) for t in trials]
    assert len(retries.counted_numbers(trials)) == N_TRIALS
    assert len(failed) >= 3
    by_number = {t.number: t for t in trials}
    ended = [t for t in failed if t.user_attrs.get("status") == "interrupted"]
    if hang:
        # The trial stuck on its GPU was ended when the worker stopped, and retried too.
        assert "this node looks broken: stopping 1 running trial(s)" in broken_out, broken_out
        assert len(ended) == 1, [(t.number, t.user_attrs.get("status")) for t in failed]
    else:
        assert ended == []
    for t in failed:
        copies = [c for c in complete if t.number in retries.retry_history(c)]
        assert len(copies) == 1, t.number
        assert copies[0].params == t.params
        if t in ended:
            continue
        # Failed of the machine on the broken worker, and retried with its params by a COMPLETE
        # copy: the healthy worker's (the broken one stopped).
        assert t.user_attrs["machine_failure"] == "CUDA launch failure", t.user_attrs
        assert "unspecified launch failure" in t.user_attrs["reason"]
        assert t.system_attrs[MACHINE_ATTR] == "CUDA launch failure"
    # The row that stopped it is recorded with its host, and `status` shows it.
    storage = study._storage
    (node,) = stopped_nodes(storage, study._study_id)
    assert node.host == host
    assert len(node.trials) == 3 and all(by_number[n].state.name == "FAIL" for n in node.trials)
    status = run_dvt_hpo("status", study_file, cwd=REPO_ROOT, timeout_s=120)
    assert status.returncode == 0, status.stderr
    assert "stopped workers (node looked broken): 1" in status.stdout, status.stdout
    assert f"  {host} (pid {node.pid})" in status.stdout
    assert f"{N_TRIALS}/{N_TRIALS} trials finished" in status.stdout, status.stdout


@pytest.mark.processes
def test_a_broken_node_stops_and_the_healthy_worker_finishes_on_sqlite(
    write_study: Callable[..., Path], unique_name: str, tmp_path: Path
) -> None:
    study_file = write_study(broken_study(unique_name, "sqlite:///broken.db"))
    check_study_after_a_broken_node(study_file, tmp_path)


@pytest.mark.processes
def test_a_broken_node_ends_its_running_trial_and_the_healthy_worker_finishes_on_postgres(
    write_study: Callable[..., Path], unique_name: str, tmp_path: Path, postgres_url: str
) -> None:
    study_file = write_study(broken_study(unique_name, postgres_url))
    check_study_after_a_broken_node(study_file, tmp_path, hang=True)


@pytest.mark.processes
def test_a_failure_of_the_params_stays_a_plain_counted_failure(
    run_study: Callable[[dict[str, Any]], optuna.Study], unique_name: str, tmp_path: Path
) -> None:
    doc = broken_study(unique_name, f"sqlite:///{tmp_path / 'params.db'}", study={"n_trials": 6})
    doc["trainer"]["config"] = {"curve": [0.1], "fail_above": 0.7}
    study = run_study(doc)
    trials = study.get_trials(deepcopy=False)
    failed = [t for t in trials if t.state.name == "FAIL"]
    assert failed and len(trials) == 6, [(t.number, t.params) for t in trials]
    for t in failed:
        assert t.user_attrs["reason"].startswith("ValueError: x=")
        assert "machine_failure" not in t.user_attrs
        assert MACHINE_ATTR not in t.system_attrs
    assert len(retries.counted_numbers(trials)) == 6  # each failure counts, none retried
    assert stopped_nodes(study._storage, study._study_id) == []


@pytest.mark.processes
def test_a_lone_broken_worker_leaves_its_trials_for_the_rerun(
    write_study: Callable[..., Path], unique_name: str, tmp_path: Path
) -> None:
    """Alone on a broken machine, a worker stops after 3 attempts and spends none of the
    budget: their copies wait, and the rerun on a healthy machine runs them first."""
    doc = broken_study(unique_name, "sqlite:///lone.db", study={"n_trials": 4})
    doc["trainer"]["config"]["sleep_s"] = 0.0
    study_file = write_study(doc)
    broken = dvt_hpo("run", str(study_file), env={**os.environ, BROKEN_ENV: str(tmp_path / "m")})
    out, err = broken.communicate(timeout=RUN_TIMEOUT_S)
    assert broken.returncode == 1, out + err
    assert err.strip().splitlines()[-1].startswith(f"error: node {socket.gethostname()} looks")
    study, _ = load(study_file)
    trials = study.get_trials(deepcopy=False)
    assert [t.state.name for t in trials].count("COMPLETE") == 1
    assert [t.state.name for t in trials].count("WAITING") == 1  # one chain, failed 3 times
    waiting = next(t for t in trials if t.state.name == "WAITING")
    assert retries.machine_retries(waiting) == 3
    rerun = dvt_hpo("run", str(study_file))
    out, err = rerun.communicate(timeout=RUN_TIMEOUT_S)
    assert rerun.returncode == 0, out + err
    trials = study.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(complete) == 4 and len(retries.counted_numbers(trials)) == 4
    assert any(t.params == waiting.params for t in complete)
