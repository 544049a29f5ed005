"""``dvt-hpo run --workers K``: K local orchestrators on one study."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest

from dvt_hpo.exceptions import SpecError
from dvt_hpo.study.workers import oversubscription, worker_command, worker_slots
from dvt_hpo.studyfile import load_spec
from tests.conftest import toy_study
from tests.orchestrator import Orchestrator, load_trials, states


def test_devices_are_dealt_out_in_blocks(write_study: Callable[..., Path]) -> None:
    spec = load_spec(write_study(toy_study("w", trials={"devices": "auto", "parallel": 2})))
    blocks = worker_slots(spec, 2, gpus=["0", "1", "2", "3"])
    assert [[s.gpus for s in block] for block in blocks] == [[("0",), ("1",)], [("2",), ("3",)]]
    argv, env = worker_command(spec.path, ["study.n_trials=4"], blocks[1], False)
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert argv[-4:] == ["--set", "study.n_trials=4", "--set", "trials.devices=auto"]
    # What the worker prints names the study as the user did (issue 18, item 3).
    assert json.loads(env["DVT_HPO_SHOWN_OVERRIDES"]) == ["study.n_trials=4"]


def test_shared_gpus_are_named_once_per_worker(write_study: Callable[..., Path]) -> None:
    # 3 GPUs, 2 trials each, 2 workers of 3 trials: each worker's slots recur on its GPUs.
    doc = toy_study("w", trials={"devices": "auto", "parallel": 3, "per_gpu": 2})
    spec = load_spec(write_study(doc))
    blocks = worker_slots(spec, 2, gpus=["0", "1", "2"])
    assert [[s.gpus for s in block] for block in blocks] == [
        [("0",), ("1",), ("2",)],
        [("0",), ("1",), ("2",)],
    ]
    assert {s.per_gpu for block in blocks for s in block} == {2}
    _, env = worker_command(spec.path, [], blocks[0], False)
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2"  # each once: CUDA refuses a repeated one
    # 2 workers x 3 trials cannot share 2 GPUs x 2: the parent refuses before any starts.
    with pytest.raises(
        SpecError,
        match=r"--workers 2 x trials.parallel=3 \(per worker\) = 6 trial slots: .* = 4 trial slot",
    ):
        worker_slots(spec, 2, gpus=["0", "1"])


def test_cpu_threads_are_shared_among_workers(
    write_study: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    spec = load_spec(write_study(toy_study("w", trials={"devices": "cpu"})))
    (block,), (other,) = worker_slots(spec, 2, gpus=[])
    _, env = worker_command(spec.path, [], [block], False)
    assert env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 2))
    assert env.get("CUDA_VISIBLE_DEVICES") == os.environ.get("CUDA_VISIBLE_DEVICES")


@pytest.mark.processes
def test_two_workers_share_the_budget_exactly(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    doc = toy_study(unique_name, study={"n_trials": 6})
    study = write_study(doc)
    code, out = Orchestrator(study, "--workers", "2").finish()
    assert code == 0, out
    trials = load_trials(study)
    assert sorted(s for _, s in states(trials)).count("COMPLETE") == 6, out
    assert "[w1]" in out and "[w2]" in out


@pytest.mark.processes
def test_ctrl_c_stops_every_worker_and_records_their_trials_for_retry(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    doc = toy_study(unique_name, study={"n_trials": 4})
    doc["trainer"]["config"]["actions"] = [{"do": "sleep", "seconds": 120}]
    study = write_study(doc)
    run = Orchestrator(study, "--workers", "2")
    spec = load_spec(study)
    deadline = time.monotonic() + 60
    running: list[optuna.trial.FrozenTrial] = []
    while time.monotonic() < deadline and len(running) < 2:
        time.sleep(0.2)  # the trials' state lives in the database: poll it
        try:
            loaded = optuna.load_study(study_name=unique_name, storage=spec.study.storage)
        except KeyError:
            continue
        running = loaded.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    assert len(running) == 2, run.output()
    os.killpg(run.proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole foreground group
    code, out = run.finish()
    assert code == 130, out
    trials = load_trials(study)
    assert sorted(s for _, s in states(trials)) == ["FAIL", "FAIL", "WAITING", "WAITING"], out
    failed = {t.number for t in trials if t.state.name == "FAIL"}
    copies = [t.system_attrs.get("failed_trial") for t in trials if t.state.name == "WAITING"]
    assert sorted(copies) == sorted(failed), out  # one copy for each interrupted trial


def test_more_threads_than_cores_is_warned(
    write_study: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 2 workers x 2 trials at a time on 2 cores took 27 s against 16 s for one orchestrator.
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    spec = load_spec(write_study(toy_study("w", trials={"devices": "cpu", "parallel": 2})))
    blocks = worker_slots(spec, 2, gpus=[])
    warning = oversubscription(spec, 2, blocks, cores=2)
    assert warning is not None and "2 workers x 2 trial(s) at a time x 1 CPU thread(s)" in warning
    assert "= 4 threads on 2 cores" in warning and "fewer --workers" in warning
    assert oversubscription(spec, 2, blocks, cores=4) is None
    # A thread count the user set is what the trials get.
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert "x 3 CPU thread(s) = 12 threads" in (oversubscription(spec, 2, blocks, cores=8) or "")


@pytest.mark.processes
def test_a_worker_with_nothing_left_exits_soon_after_the_last_trial(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    # One trial each, of different lengths: the worker done first waits for its sibling's
    # trial (it may fail and need a retry), and used to re-read the study only every
    # heartbeat_interval_s: up to 20 s idle here after that trial ended.
    doc = toy_study(
        unique_name,
        study={"n_trials": 2, "heartbeat_interval_s": 20, "grace_period_s": 60},
        search_space=[
            {"name": "s", "path": "actions[0].seconds", "kind": "float", "low": 0.1, "high": 3}
        ],
    )
    doc["trainer"]["config"] = {
        "actions": [{"do": "sleep", "seconds": 0}, {"do": "curve", "values": [0.5]}]
    }
    study = write_study(doc)
    code, out = Orchestrator(study, "--workers", "2").finish()
    ended = time.time()
    assert code == 0, out
    trials = load_trials(study)
    assert [s for _, s in states(trials)] == ["COMPLETE", "COMPLETE"], out
    last = max(t.datetime_complete for t in trials if t.datetime_complete is not None)
    # Not a heartbeat interval: a poll of about a second, plus the workers' own exit.
    assert ended - last.timestamp() < 10, (ended - last.timestamp(), out)
    watch = [line for line in out.splitlines() if "watch it:" in line]
    assert len(watch) == 2 and not any("--set" in line for line in watch), watch
