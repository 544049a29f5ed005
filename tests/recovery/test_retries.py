"""Crash recovery and interruption of a real ``dvt-hpo run`` process: kill -9, Ctrl-C, SIGTERM.

The orchestrator runs as a subprocess (``python -m dvt_hpo run``) on the toy entry point, driven
through tests/orchestrator.py: the FIFO handshake makes a trial observable and blockable without
sleeping.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest

from dvt_hpo.budget.ledger import Budget, Ledger
from dvt_hpo.budget.trials import OVER_BUDGET_ATTR, RETRY_ATTR
from dvt_hpo.process import tree as process_tree
from dvt_hpo.recovery import retries
from dvt_hpo.studyfile import load_spec
from tests.conftest import REPO_ROOT, toy_study
from tests.orchestrator import (
    EVENT_TIMEOUT_S,
    Orchestrator,
    fifo_study,
    load_trials,
    processes_mentioning,
    release_trial,
    snapshot,
    states,
    wait_trial_running,
)
from tests.recovery.test_stale import beat_ago, started_ago

# -- tests --------------------------------------------------------------------------------


@pytest.mark.processes
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_kill_9_of_the_orchestrator_leaves_no_orphan_and_the_rerun_retries_the_trial(
    tmp_path: Path,
    write_study: Callable[..., Path],
    orchestrator: Callable[[Path], Orchestrator],
    runs_dir: Path,
    unique_name: str,
    warm: bool,
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    study = write_study(fifo_study(unique_name, fifo, study={"n_trials": 2}, trials={"warm": warm}))

    first = orchestrator(study)
    wait_trial_running(fifo)
    trial_pids = processes_mentioning(runs_dir)
    assert trial_pids, "the running trial's process is not visible in /proc"
    first.proc.kill()
    assert first.proc.wait(timeout=EVENT_TIMEOUT_S) == -signal.SIGKILL
    # The trial's watchdog (control socket EOF) and PR_SET_PDEATHSIG end it: no orphan.
    assert process_tree.wait_gone(trial_pids, 10), f"orphaned trial processes: {trial_pids}"
    assert processes_mentioning(runs_dir) == []
    before = load_trials(study)
    assert states(before) == [(0, "RUNNING")]
    original_params = before[0].params

    fifo.unlink()  # the toy's write/read now go through a plain file: every trial finishes
    code, out = orchestrator(study).finish()
    assert code == 0, out
    trials = load_trials(study)
    assert trials[0].state.name == "FAIL", states(trials)  # stale heartbeat
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == 0]
    assert len(retries) == 1, states(trials)
    retry = retries[0]
    assert retry.state.name == "COMPLETE" and retry.value == pytest.approx(0.3)
    assert retry.params == original_params
    assert retry.system_attrs["retry_history"] == [0]
    assert retry.user_attrs.get("retry_of") == 0
    # The budget: exactly n_trials trials count; the superseded FAIL does not.
    assert sorted(t.state.name for t in trials) == ["COMPLETE", "COMPLETE", "FAIL"]
    assert processes_mentioning(runs_dir) == []

    code, out = orchestrator(study).finish()
    assert code == 0, out
    assert "nothing to run" in out
    assert [snapshot(t) for t in load_trials(study)] == [snapshot(t) for t in trials]


@pytest.mark.processes
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_ctrl_c_records_the_running_trial_as_interrupted_and_the_rerun_runs_its_copy(
    tmp_path: Path,
    write_study: Callable[..., Path],
    orchestrator: Callable[[Path], Orchestrator],
    runs_dir: Path,
    unique_name: str,
    warm: bool,
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    study = write_study(fifo_study(unique_name, fifo, study={"n_trials": 3}, trials={"warm": warm}))

    run = orchestrator(study)
    wait_trial_running(fifo)
    release_trial(fifo)  # trial 0 completes
    wait_trial_running(fifo)  # trial 1 runs
    assert processes_mentioning(runs_dir), "the running trial's process is not visible in /proc"
    # A terminal's Ctrl-C signals the whole foreground process group; trials run in sessions
    # of their own, so only the orchestrator gets it and it stops them itself.
    os.killpg(run.proc.pid, signal.SIGINT)
    code, out = run.finish()
    assert code == 130, out
    assert "interrupted" in out
    # The orchestrator waited until the trial's processes were gone before it exited.
    assert processes_mentioning(runs_dir) == []

    trials = load_trials(study)
    assert states(trials) == [(0, "COMPLETE"), (1, "FAIL"), (2, "WAITING")]
    interrupted, copy = trials[1], trials[2]
    assert interrupted.user_attrs["status"] == "interrupted"
    assert copy.params == interrupted.params
    assert copy.system_attrs["failed_trial"] == 1
    completed_before = snapshot(trials[0])

    fifo.unlink()
    code, out = orchestrator(study).finish()
    assert code == 0, out
    trials = load_trials(study)
    assert states(trials) == [(0, "COMPLETE"), (1, "FAIL"), (2, "COMPLETE"), (3, "COMPLETE")]
    assert trials[2].params == interrupted.params
    assert trials[2].user_attrs["status"] == "ok"
    # The retry starts clean: the interrupted attempt's reason is not carried over.
    assert "reason" not in trials[2].user_attrs
    assert snapshot(trials[0]) == completed_before


@pytest.mark.processes
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_sigterm_to_the_orchestrator_is_an_interruption(
    tmp_path: Path,
    write_study: Callable[..., Path],
    orchestrator: Callable[[Path], Orchestrator],
    runs_dir: Path,
    unique_name: str,
    warm: bool,
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    study = write_study(fifo_study(unique_name, fifo, study={"n_trials": 1}, trials={"warm": warm}))

    run = orchestrator(study)
    wait_trial_running(fifo)
    run.proc.terminate()  # `kill PID`, a container stop, a batch scheduler's preemption
    code, out = run.finish()
    assert code == 130, out
    assert processes_mentioning(runs_dir) == []
    trials = load_trials(study)
    assert states(trials) == [(0, "FAIL"), (1, "WAITING")]
    assert trials[0].user_attrs["status"] == "interrupted"
    assert trials[1].params == trials[0].params
    assert trials[1].system_attrs["failed_trial"] == 0


@pytest.mark.processes
def test_a_second_signal_while_stopping_does_not_abandon_the_trial(
    tmp_path: Path,
    write_study: Callable[..., Path],
    orchestrator: Callable[[Path], Orchestrator],
    runs_dir: Path,
    unique_name: str,
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    doc = fifo_study(unique_name, fifo, study={"n_trials": 1}, trials={"stop_grace_s": 3})
    # The trial ignores SIGTERM: stopping it takes the whole stop grace, then SIGKILL.
    doc["trainer"]["config"]["actions"].insert(0, {"do": "ignore_sigterm"})
    study = write_study(doc)

    run = orchestrator(study)
    wait_trial_running(fifo)
    run.proc.terminate()
    run.wait_line("interrupted: stopping")  # now inside the stop grace
    run.proc.terminate()  # impatient: `kill` again, or a supervisor's repeated SIGTERM
    code, out = run.finish()
    assert code == 130, out
    assert processes_mentioning(runs_dir) == []
    trials = load_trials(study)
    assert states(trials) == [(0, "FAIL"), (1, "WAITING")], out
    assert trials[0].user_attrs["status"] == "interrupted"


# -- retries and the budget, on a real storage, without processes ------------------------------


def _sqlite_study(tmp_path: Path, name: str = "s") -> tuple[optuna.Study, Any]:
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.db'}")
    return optuna.create_study(storage=storage, study_name=name), storage


def _waiting(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_one_retry_per_failed_attempt_when_two_workers_fail_it(tmp_path: Path) -> None:
    study, storage = _sqlite_study(tmp_path)
    trial = study.ask()
    trial.suggest_float("x", 0.0, 1.0)
    # Worker B finds the trial stale and fails it; worker A's interrupted run records it too.
    assert retries.fail_attempt(study, storage, trial._trial_id, retry=True, max_retries=3)
    assert not retries.fail_attempt(study, storage, trial._trial_id, retry=True, max_retries=3)
    copies = _waiting(study)
    assert len(copies) == 1 and copies[0].params == trial.params
    assert retries.retried_trial_number(copies[0]) == trial.number


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_an_interrupted_trial_already_failed_as_stale_is_not_enqueued_twice(
    tmp_path: Path, write_study: Callable[..., Path], unique_name: str
) -> None:
    from dvt_hpo.devices.slots import Slot
    from dvt_hpo.results.outcome import Outcome
    from dvt_hpo.store.storage import retry_callback
    from dvt_hpo.study.loop import StudyRunner
    from dvt_hpo.study.trial_run import TrialRun

    spec = load_spec(write_study(toy_study(unique_name, trials={"max_retries": 2})))
    runner = StudyRunner(spec, out=lambda line: None)
    runner.open_study()
    trial = runner.study.ask()
    trial.suggest_float("x", 0.0, 1.0)
    run = TrialRun(runner.handle, trial, dict(trial.params), {}, Slot(0, "", 1))
    # Another worker's heartbeat check failed it as stale and enqueued its copy (Optuna's path).
    runner.storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
    retry_callback(2)(runner.study, runner.storage.get_trial(trial._trial_id))
    # This worker's Ctrl-C then records the same attempt as interrupted.
    outcome = run._record(Outcome("FAIL", "interrupted", reason="interrupted", retry=True), None)
    assert outcome.state == "FAIL"
    assert len(_waiting(runner.study)) == 1


def _marked_fail(study: optuna.Study, storage: Any, params: dict[str, float]) -> int:
    """A FAIL attempt marked for a retry whose copy was never enqueued (its worker died)."""
    trial = study.ask()
    for name, value in params.items():
        trial.suggest_float(name, value, value)
    assert retries.fail_attempt(
        study, storage, trial._trial_id, retry=True, max_retries=3, enqueue=False
    )
    return trial.number


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_a_marked_failure_without_its_copy_is_enqueued_once_and_counted_meanwhile(
    tmp_path: Path,
) -> None:
    study, storage = _sqlite_study(tmp_path)
    number = _marked_fail(study, storage, {"x": 0.25})
    done = study.ask()
    study.tell(done, 1.0)
    ledger = Ledger(study, storage, storage.get_study_id_from_name("s"), max_retries=3)
    ledger.refresh()
    # Counted (its copy will take its place) and pending: a worker waits for it, never leaves.
    assert ledger.budget(lambda n: False) == Budget(2, 0, 0, pending=1)

    assert retries.enqueue_retries(study, max_retries=3, lock=contextlib.nullcontext) == [number]
    assert retries.enqueue_retries(study, max_retries=3, lock=contextlib.nullcontext) == []
    (copy,) = _waiting(study)
    assert copy.params == {"x": 0.25} and retries.retry_history(copy) == [number]
    # The copy is a fresh attempt: the failed one's mark is not carried over.
    assert RETRY_ATTR not in copy.system_attrs
    ledger.refresh()
    assert ledger.budget(lambda n: False) == Budget(2, 1, 0, pending=0)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_no_copy_past_max_retries_and_none_for_a_failure_not_marked(tmp_path: Path) -> None:
    study, storage = _sqlite_study(tmp_path)
    plain = study.ask()
    study.tell(plain, state=optuna.trial.TrialState.FAIL)  # a trainer's error: not retried
    number = _marked_fail(study, storage, {"x": 0.5})
    assert retries.enqueue_retries(study, max_retries=0, lock=contextlib.nullcontext) == []
    assert retries.pending_retries(study.get_trials(), 0) == []
    assert [t.number for t in retries.pending_retries(study.get_trials(), 1)] == [number]


def _enqueue_racer(url: str, name: str, barrier: Any, out: Any) -> None:
    from dvt_hpo.store.lock import retry_lock

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(url)
    study = optuna.load_study(study_name=name, storage=storage)
    study_id = storage.get_study_id_from_name(name)
    barrier.wait()
    out.put(retries.enqueue_retries(study, max_retries=3, lock=lambda: retry_lock(url, study_id)))


@pytest.mark.processes
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_workers_repairing_at_the_same_instant_enqueue_one_copy(
    tmp_path: Path, request: pytest.FixtureRequest, unique_name: str, backend: str
) -> None:
    import multiprocessing

    url = (
        f"sqlite:///{tmp_path}/study.db"
        if backend == "sqlite"
        else str(request.getfixturevalue("postgres_url"))
    )
    storage = optuna.storages.RDBStorage(url)
    study = optuna.create_study(storage=storage, study_name=unique_name)
    numbers = [_marked_fail(study, storage, {"x": x}) for x in (0.1, 0.2, 0.3)]
    context = multiprocessing.get_context("spawn")
    n_workers = 6
    barrier, out = context.Barrier(n_workers), context.Queue()
    racers = [
        context.Process(target=_enqueue_racer, args=(url, unique_name, barrier, out))
        for _ in range(n_workers)
    ]
    for racer in racers:
        racer.start()
    enqueued = [out.get(timeout=EVENT_TIMEOUT_S * 2) for _ in racers]
    for racer in racers:
        racer.join(EVENT_TIMEOUT_S)
        assert racer.exitcode == 0
    # Each failed attempt got exactly one copy, by whichever worker held the lock first.
    assert sorted(n for got in enqueued for n in got) == numbers
    copies = _waiting(study)
    assert sorted(retries.retried_trial_number(c) for c in copies) == numbers


@pytest.mark.processes
def test_the_retry_lock_waits_then_times_out_and_a_killed_holder_frees_it(
    tmp_path: Path,
) -> None:
    from dvt_hpo.store.lock import retry_lock

    url = f"sqlite:///{tmp_path}/study.db"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from dvt_hpo.store.lock import retry_lock\n"
            "with retry_lock(sys.argv[1], 1):\n"
            "    print('held', flush=True); sys.stdin.read()",
            url,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=REPO_ROOT,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        with pytest.raises(TimeoutError), retry_lock(url, 1, timeout_s=0.2):
            pass
        holder.kill()  # killed while holding it: the kernel releases it
        holder.wait(EVENT_TIMEOUT_S)
        with retry_lock(url, 1, timeout_s=EVENT_TIMEOUT_S):
            pass
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(EVENT_TIMEOUT_S)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_the_sweep_retries_a_dead_workers_trials_but_closes_one_marked_over_budget(
    tmp_path: Path,
) -> None:
    storage = optuna.storages.RDBStorage(
        f"sqlite:///{tmp_path / 'study.db'}", heartbeat_interval=1, grace_period=1
    )
    study = optuna.create_study(storage=storage, study_name="s")
    dead = study.ask()  # its worker died before its first heartbeat
    dead.suggest_float("x", 0.0, 1.0)
    over = study.ask()  # its worker died after marking it over budget, before the FAIL
    storage.set_trial_system_attr(over._trial_id, OVER_BUDGET_ATTR, True)
    alive = study.ask()  # the sweeping worker's own
    started_ago(storage, dead._trial_id, 10)  # no heartbeat: its start stands in
    beat_ago(storage, over._trial_id, 10)
    beat_ago(storage, alive._trial_id, 10)  # stale-looking, but the sweeper's own
    retries.reconcile(
        study,
        storage,
        grace_period_s=1,
        max_retries=2,
        is_ours=lambda n: n == alive.number,
        lock=contextlib.nullcontext,
    )
    by_number = {t.number: t for t in study.get_trials()}
    assert by_number[dead.number].state.name == "FAIL"
    assert by_number[over.number].state.name == "FAIL"
    assert by_number[alive.number].state.name == "RUNNING"
    (copy,) = _waiting(study)
    assert copy.params == dead.params and retries.retry_history(copy) == [dead.number]


def test_machine_failures_are_retried_outside_max_retries(tmp_path: Path) -> None:
    """A copy made for a failure of the machine does not use up trials.max_retries: with
    max_retries 0 it is still made, and the chain's later (ordinary) failures get theirs."""
    from optuna.distributions import FloatDistribution

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'm.db'}")
    study = optuna.create_study(storage=storage, study_name="machine")
    first = study.ask({"x": FloatDistribution(0.0, 1.0)})
    retries.mark_machine_failure(storage, first._trial_id, "CUDA launch failure")
    assert retries.fail_attempt(study, storage, first._trial_id, retry=True, max_retries=0)
    copy = study.get_trials(deepcopy=False)[1]
    assert copy.state.name == "WAITING" and copy.params == first.params
    assert retries.retry_history(copy) == [0]
    assert retries.machine_retries(copy) == 1

    def fail_next(*, machine: bool, max_retries: int) -> int:
        trial = study.ask()  # the oldest WAITING copy
        if machine:
            retries.mark_machine_failure(storage, trial._trial_id, "GPU lost")
        retries.fail_attempt(study, storage, trial._trial_id, retry=True, max_retries=max_retries)
        return trial.number

    # An interrupted copy: its chain made one copy, for the machine; max_retries 1 allows one.
    assert fail_next(machine=False, max_retries=1) == 1
    trials = study.get_trials(deepcopy=False)
    assert [t.state.name for t in trials] == ["FAIL", "FAIL", "WAITING"]
    assert retries.machine_retries(trials[2]) == 1
    # Interrupted again: the one ordinary retry is used; no copy, and the ledger agrees.
    assert fail_next(machine=False, max_retries=1) == 2
    trials = study.get_trials(deepcopy=False)
    assert [t.state.name for t in trials] == ["FAIL", "FAIL", "FAIL"]
    assert retries.pending_retries(trials, 1) == []
    ledger = Ledger(study, storage, study._study_id, max_retries=1)
    ledger.refresh()
    assert ledger.pending() == []
    assert ledger.budget(lambda n: False).used == 1  # one config, its last attempt counted
