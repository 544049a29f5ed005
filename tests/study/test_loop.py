"""The study loop with real trial processes (the torch-free toy entry point)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest

from dvt_hpo.exceptions import StudyStopped
from dvt_hpo.process.tree import pid_alive, wait_gone
from dvt_hpo.recovery.retries import retried_trial_number
from dvt_hpo.results.events import (
    BaseObserver,
    StudyEnded,
    StudyStarted,
    TrialFinished,
    TrialReported,
    TrialStarted,
)
from dvt_hpo.run.preflight import load_runnable
from dvt_hpo.store.opening import StudyAt
from dvt_hpo.study.loop import StudyRunner
from dvt_hpo.study.starter import TrialStarter
from dvt_hpo.studyfile import load_spec
from dvt_hpo.views.html_report import write_report
from dvt_hpo.views.status import format_status, read_status
from tests.conftest import run_dvt_hpo, toy_study
from tests.entrypoints.dropped import deliver_in_weakref_callback
from tests.store.suite.gated import run_gated

pytestmark = pytest.mark.processes

State = optuna.trial.TrialState


def run(path: Path, *overrides: str, lines: list[str] | None = None) -> optuna.Study:
    out = lines.append if lines is not None else (lambda line: None)
    return StudyRunner(load_spec(path, overrides), out=out).run()


def run_failing(path: Path, *overrides: str) -> optuna.Study:
    """Run a study whose trials all fail: the run ends with exit 1's StudyStopped."""
    with pytest.raises(StudyStopped, match="no trial of this run succeeded"):
        run(path, *overrides)
    return optuna.load_study(
        study_name=load_spec(path).study.name, storage=load_spec(path).study.storage
    )


def toy(name: str, actions: list[dict[str, Any]], **sections: Any) -> dict[str, Any]:
    doc = toy_study(name, **sections)
    doc["trainer"]["config"] = {**doc["trainer"]["config"], "actions": actions}
    return doc


@pytest.mark.parametrize(("reduce", "expected"), [("best", 0.9), ("last", 0.4)])
def test_objective_is_reduced_over_the_streamed_history(
    write_study: Callable[..., Path], unique_name: str, reduce: str, expected: float
) -> None:
    doc = toy(unique_name, [{"do": "curve", "values": [0.1, 0.9, 0.4]}])
    doc["objective"]["reduce"] = reduce
    lines: list[str] = []
    study = run(write_study(doc), lines=lines)
    trials = study.get_trials(states=(State.COMPLETE,))
    assert len(trials) == 2
    for t in trials:
        assert t.value == pytest.approx(expected)
        assert t.intermediate_values == {0: 0.1, 1: 0.9, 2: 0.4}
        assert t.user_attrs["status"] == "ok"
        assert t.user_attrs["epochs_reported"] == 3
        assert Path(t.user_attrs["log_dir"]).is_dir()
    assert study.metric_names == ["score"]
    assert sum("COMPLETE" in line for line in lines) == 2
    assert any(line.startswith("best trial") for line in lines)


def test_a_trial_that_never_reports_the_metric_fails_listing_what_it_reported(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    doc = toy(unique_name, [{"do": "report", "step": 0, "metrics": {"acc": 0.5, "loss": 1.0}}])
    doc["study"]["n_trials"] = 1
    study = run_failing(write_study(doc))
    (trial,) = study.trials
    assert trial.state == State.FAIL
    assert "'score' was never reported" in trial.user_attrs["reason"]
    assert "['acc', 'loss']" in trial.user_attrs["reason"]


FAULTS = {
    "raise": (
        [{"do": "raise", "type": "ValueError", "message": "bad shape 3x4"}],
        {},
        "ValueError: bad shape 3x4",
    ),
    "exit": ([{"do": "exit", "code": 7}], {}, "exit code 7"),
    "segfault": ([{"do": "segfault"}], {}, "SIGSEGV"),
    "timeout": ([{"do": "sleep", "seconds": 60}], {"timeout_s": 1.5}, "timed out after"),
    "memory": (
        [{"do": "allocate", "bytes": 3 * 2**30}],
        {"memory_limit": "1GiB"},
        "MemoryError",
    ),
}


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_faults_are_recorded_and_the_study_goes_on(
    write_study: Callable[..., Path], unique_name: str, fault: str, warm: bool
) -> None:
    actions, trials_section, reason = FAULTS[fault]
    doc = toy(
        unique_name,
        [{"do": "curve", "values": [0.5]}],
        trials={"stop_grace_s": 1, "warm": warm},
    )
    doc["trials"].update(trials_section)
    doc["trainer"]["entrypoint"] = "tests.entrypoints.switch:run"
    doc["trainer"]["config"].update(fault=False, fault_actions=actions)
    doc["search_space"] = [
        {"name": "fault", "path": "fault", "kind": "categorical", "choices": [True, False]}
    ]
    spec = load_spec(write_study(doc))
    # The first trial faults, the second completes: the study goes on.
    study = optuna.create_study(
        storage=spec.study.storage, study_name=unique_name, direction="maximize"
    )
    study.enqueue_trial({"fault": True})
    study.enqueue_trial({"fault": False})
    StudyRunner(spec, out=lambda line: None).run()
    failed, ok = sorted(study.trials, key=lambda t: t.number)
    assert failed.state == State.FAIL, failed.user_attrs
    assert reason in failed.user_attrs["reason"], failed.user_attrs
    assert Path(failed.user_attrs["log_dir"], "stderr.log").is_file()
    assert ok.state == State.COMPLETE and ok.value == 0.5


def test_stderr_tail_and_traceback_are_kept(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    doc = toy(unique_name, [{"do": "raise", "message": "boom"}])
    doc["study"]["n_trials"] = 1
    (trial,) = run_failing(write_study(doc)).trials
    assert "RuntimeError: boom" in trial.user_attrs["reason"]
    assert "toy.py" in trial.user_attrs["traceback"]
    assert trial.user_attrs["status"] == "failed"


def test_max_failures_stops_a_study_whose_trials_keep_failing(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    doc = toy(unique_name, [{"do": "raise", "message": "broken entry point"}])
    doc["study"].update(n_trials=10, max_failures=2)
    lines: list[str] = []
    with pytest.raises(StudyStopped, match=r"max_failures=2.*broken entry point"):
        run(write_study(doc), lines=lines)
    study = optuna.load_study(
        study_name=unique_name, storage=load_spec(write_study(doc)).study.storage
    )
    assert len(study.trials) == 2


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_a_pruned_trial_stops_at_the_pruned_step_and_its_processes_are_gone(
    write_study: Callable[..., Path], unique_name: str, warm: bool
) -> None:
    doc = toy(
        unique_name,
        [{"do": "spawn", "seconds": 120}, {"do": "curve", "values": [0.1, 0.1, 0.1, 0.1]}],
        trials={"warm": warm},
    )
    doc["study"]["n_trials"] = 1
    doc["study"]["pruner"] = {"kind": "threshold", "lower": 0.5}
    (trial,) = run(write_study(doc)).trials
    assert trial.state == State.PRUNED
    # The bounded hand-off: the trial never trained (reported) past the pruned step.
    assert trial.intermediate_values == {0: 0.1}
    assert trial.user_attrs["pruned_step"] == 0
    child = trial.user_attrs["child_pid"]
    assert wait_gone([child], timeout_s=5), "the trial's child process outlived the prune"


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_a_child_that_left_the_trial_group_ends_with_the_trial(
    write_study: Callable[..., Path], unique_name: str, warm: bool
) -> None:
    # start_new_session=True: out of the trial's process group, which a stop signals, and
    # holding the trial's stdout and stderr pipes (issue 18, item 10).
    doc = toy(
        unique_name,
        [{"do": "spawn", "seconds": 120, "new_session": True}, {"do": "curve", "values": [0.5]}],
        trials={"warm": warm},
    )
    doc["study"]["n_trials"] = 1
    (trial,) = run(write_study(doc)).trials
    assert trial.state == State.COMPLETE, trial.user_attrs
    child = trial.user_attrs["child_pid"]
    # Stopped before the trial was recorded, not left to run on under init.
    assert not pid_alive(child)
    assert trial.user_attrs["strays_stopped"] == [child]
    # The pipes it held added nothing (two 5 s waits for their end of file before).
    assert trial.user_attrs["duration_s"] < 5, trial.user_attrs


def test_parallel_trials_run_at_the_same_time(
    write_study: Callable[..., Path], unique_name: str, tmp_path: Path
) -> None:
    fifo = tmp_path / "meet"
    os.mkfifo(fifo)
    doc = toy(unique_name, [], trials={"parallel": 2, "devices": "cpu", "timeout_s": 20})
    doc["trainer"] = {
        "entrypoint": "tests.entrypoints.meet:run",
        "config": {"fifo": str(fifo), "x": 0.0},
    }
    study = run(write_study(doc))
    assert [t.state for t in study.trials] == [State.COMPLETE, State.COMPLETE]
    for t in study.trials:
        assert t.user_attrs["cuda"] == ""  # devices: cpu hides GPUs from the trial
        assert int(t.user_attrs["omp"]) >= 1


def test_resume_runs_only_the_remaining_trials(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    doc = toy(unique_name, [{"do": "curve", "values": [0.3]}])
    doc["study"]["n_trials"] = 3
    path = write_study(doc)
    first = run(path, "study.n_trials=2")
    assert len(first.trials) == 2
    before = {t.number: (t.value, t.datetime_complete) for t in first.trials}
    lines: list[str] = []
    second = run(path, lines=lines)
    assert len(second.trials) == 3
    assert sum(" COMPLETE " in line for line in lines) == 1
    assert {t.number: (t.value, t.datetime_complete) for t in second.trials[:2]} == before
    lines.clear()
    third = run(path, lines=lines)
    assert len(third.trials) == 3
    assert any("nothing to run" in line for line in lines)


def test_a_changed_search_space_is_refused_unless_allowed(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    from dvt_hpo.exceptions import SpecError

    doc = toy(unique_name, [{"do": "curve", "values": [0.3]}])
    doc["study"]["n_trials"] = 1
    path = write_study(doc)
    run(path)
    with pytest.raises(SpecError, match=r"differs from the study.*search_space.*x") as info:
        run(path, "search_space[0].high=5.0", "study.n_trials=2")
    assert "--allow-space-change" in str(info.value)
    spec = load_spec(path, ["search_space[0].high=5.0", "study.n_trials=2"])
    study = StudyRunner(spec, allow_space_change=True, out=lambda line: None).run()
    assert len(study.trials) == 2


def test_two_workers_on_postgres_share_the_budget_exactly(
    postgres_url: str, write_study: Callable[..., Path], unique_name: str
) -> None:
    doc = toy(unique_name, [{"do": "curve", "values": [0.1, 0.2]}])
    doc["study"].update(storage=postgres_url, n_trials=6)
    path = write_study(doc)
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "dvt_hpo", "run", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        outputs = [w.communicate(timeout=120)[0] for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    try:
        assert [w.returncode for w in workers] == [0, 0], outputs
        study = optuna.load_study(study_name=unique_name, storage=postgres_url)
        complete = study.get_trials(states=(State.COMPLETE,))
        assert len(complete) == 6
        # Each worker ran some; any extra trial ask raced for was closed as over budget.
        extra = [t for t in study.trials if t.user_attrs.get("status") == "over-budget"]
        assert len(study.trials) == 6 + len(extra)
        assert "password" not in "".join(outputs)
    finally:
        optuna.delete_study(study_name=unique_name, storage=postgres_url)


def test_journal_storage_recovers_a_stale_trial_with_its_params(
    write_study: Callable[..., Path], unique_name: str, tmp_path: Path
) -> None:
    # Optuna's journal storage has no heartbeat table; the runner keeps the same rule on a
    # trial attr. A RUNNING trial whose last beat is older than the grace period is a trial
    # whose orchestrator died.
    import time

    doc = toy(unique_name, [{"do": "curve", "values": [0.7]}])
    doc["study"].update(storage=f"journal:///{tmp_path}/study.log", n_trials=1)
    path = write_study(doc)
    opened = StudyAt(load_spec(path).study.storage, unique_name).create_or_load(["maximize"])
    storage, study = opened.storage, opened.study
    dead = study.ask()
    x = dead.suggest_float("x", 0.0, 1.0)
    storage.set_trial_system_attr(dead._trial_id, "dvt_hpo:heartbeat", time.time() - 100)

    study = run(path)
    first, retry = study.trials
    assert first.state == State.FAIL
    assert retry.state == State.COMPLETE and retry.params == {"x": x}
    assert retry.system_attrs["retry_history"] == [0]


# -- observers ---------------------------------------------------------------------------


# Trial 0 completes, trial 1 raises, trial 2 is pruned at its first report (score < 0.5).
THREE_FATES = """
def run(config, ctx):
    if ctx.trial_number == 1:
        raise ValueError("trial one breaks")
    score = 0.9 if ctx.trial_number == 0 else 0.1
    for step in range(2):
        ctx.report(step, {"score": score, "loss": 1.0 - score})
    return {"score": score}
"""


class Recording(BaseObserver):
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.lock = threading.Lock()
        self.closed = False

    def _add(self, event: Any) -> None:
        with self.lock:
            self.events.append(event)

    def study_started(self, event: StudyStarted) -> None:
        self._add(event)

    def trial_started(self, event: TrialStarted) -> dict[str, Any] | None:
        self._add(event)
        return {"observer_run_id": f"run-{event.number}"}

    def trial_reported(self, event: TrialReported) -> None:
        self._add(event)

    def trial_finished(self, event: TrialFinished) -> None:
        self._add(event)

    def study_ended(self, event: StudyEnded) -> None:
        self._add(event)

    def close(self) -> None:
        self.closed = True


class Broken(BaseObserver):
    def trial_started(self, event: TrialStarted) -> dict[str, Any] | None:
        raise RuntimeError("tracking server down")

    def trial_reported(self, event: TrialReported) -> None:
        raise RuntimeError("tracking server down")


def of(events: list[Any], kind: type) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def test_observers_see_the_study_and_a_broken_one_costs_only_warnings(
    write_study: Callable[..., Path], unique_name: str, tmp_path: Path
) -> None:
    (tmp_path / "fates.py").write_text(textwrap.dedent(THREE_FATES))
    doc = toy_study(
        unique_name,
        study={"n_trials": 3, "pruner": {"kind": "threshold", "lower": 0.5}},
    )
    doc["trainer"]["entrypoint"] = "fates:run"
    spec = load_spec(write_study(doc))
    recording = Recording()
    lines: list[str] = []
    study = StudyRunner(spec, out=lines.append, observers=[Broken(), recording]).run()
    events = recording.events

    assert isinstance(events[0], StudyStarted) and isinstance(events[-1], StudyEnded)
    started = events[0]
    assert (started.study_name, started.n_trials, started.n_done) == (unique_name, 3, 0)
    assert started.metric == "score" and started.direction == "maximize"

    assert [e.number for e in of(events, TrialStarted)] == [0, 1, 2]
    assert all(e.retry_of is None for e in of(events, TrialStarted))
    finished = {e.number: e for e in of(events, TrialFinished)}
    assert {n: e.state for n, e in finished.items()} == {0: "COMPLETE", 1: "FAIL", 2: "PRUNED"}
    assert finished[0].value == 0.9 and finished[0].reason is None
    assert "ValueError: trial one breaks" in (finished[1].reason or "")
    # Pruned reads as pruned, and by which pruner, everywhere (issue 18, item 6).
    pruned = "pruned at step 0 by ThresholdPruner"
    assert finished[2].reason == pruned
    assert finished[0].user_attrs["epochs_reported"] == 2

    reported = of(events, TrialReported)
    assert [(e.number, e.step) for e in reported] == [(0, 0), (0, 1), (2, 0)]
    assert reported[0].metrics == {"score": 0.9, "loss": pytest.approx(0.1)}
    for number in (0, 2):  # each trial's reports come between its start and its finish
        index = [i for i, e in enumerate(events) if getattr(e, "number", None) == number]
        kinds = [type(events[i]) for i in index]
        assert kinds[0] is TrialStarted and kinds[-1] is TrialFinished

    ended = events[-1]
    assert (ended.n_done, ended.best_number, ended.best_value, ended.exit_code) == (2, 0, 0.9, 0)
    assert recording.closed

    # What trial_started returned is on the trial; the broken observer changed nothing else.
    assert [t.user_attrs["observer_run_id"] for t in study.trials] == ["run-0", "run-1", "run-2"]
    warnings = [line for line in lines if line.startswith("warning: observer Broken.")]
    assert len(warnings) == 3 + 3  # trial_started x3, trial_reported x3 (one line each)
    assert all("tracking server down" in line for line in warnings)

    attrs = study.trials[2].user_attrs
    assert attrs["reason"] == pruned and attrs["exit"].startswith("pruned (exit code"), attrs
    opened = StudyAt.of(spec).load()
    text = format_status(read_status(opened.storage, opened.study_id, spec))
    assert "last pruned:\n  trial    2  " in text and f"{pruned}\nlast failures:" in text, text
    write_report(spec, tmp_path / "report.html")
    assert f"<td>{pruned}</td>" in (tmp_path / "report.html").read_text()


class DropsAnInterrupt(BaseObserver):
    """Gets a Ctrl-C that Python drops while a trial starts."""

    def __init__(self) -> None:
        self.dropped: list[Any] = []

    def trial_started(self, event: TrialStarted) -> dict[str, Any] | None:
        self.dropped = deliver_in_weakref_callback(signal.SIGINT)
        return None


def test_a_ctrl_c_that_python_dropped_still_stops_the_run_and_records_the_trial(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    # What CI once saw: the interrupt raised inside SQLAlchemy's weakref callback was dropped,
    # every later signal was ignored, and the worker ran on until its trial ended.
    doc = toy(unique_name, [{"do": "sleep", "seconds": 20}], study={"n_trials": 1})
    spec = load_spec(write_study(doc))
    observer = DropsAnInterrupt()
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        StudyRunner(spec, out=lines.append, observers=[observer]).run()
    assert [type(d.exc_value) for d in observer.dropped] == [KeyboardInterrupt]
    trials = optuna.load_study(study_name=unique_name, storage=spec.study.storage).trials
    assert [t.state for t in trials] == [State.FAIL, State.WAITING], lines
    assert trials[0].user_attrs["status"] == "interrupted"
    assert trials[1].system_attrs["failed_trial"] == 0


# -- issue 8: results that can be trusted, no hang --------------------------------------------


def test_a_nan_objective_fails_the_trial_at_once_as_diverged(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    doc = toy(unique_name, [{"do": "curve", "values": [1.0, "nan", 0.5, 0.4]}])
    doc["study"]["n_trials"] = 1
    doc["objective"] = {"metric": "val_mse", "direction": "minimize"}
    doc["trainer"]["config"]["metric"] = "val_mse"
    lines: list[str] = []
    with pytest.raises(StudyStopped, match=r"diverged at step 1 \(val_mse=nan\)"):
        run(write_study(doc), lines=lines)
    (trial,) = optuna.load_study(
        study_name=unique_name, storage=load_spec(write_study(doc)).study.storage
    ).trials
    assert trial.state == State.FAIL
    assert trial.user_attrs["reason"] == "diverged at step 1 (val_mse=nan)"
    # Stopped at the NaN: steps 2 and 3 never ran; the NaN never reached Optuna.
    assert trial.user_attrs["epochs_reported"] == 2
    assert trial.user_attrs["diverged_step"] == 1
    assert trial.intermediate_values == {0: 1.0}
    assert not any("never reported" in line for line in lines)


def test_a_run_in_which_no_trial_succeeded_ends_with_the_most_common_reason(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    doc = toy(unique_name, [{"do": "raise", "type": "ValueError", "message": "bad data"}])
    lines: list[str] = []
    with pytest.raises(StudyStopped) as stopped:
        run(write_study(doc), lines=lines)
    assert str(stopped.value) == (
        "no trial of this run succeeded (2 failed); most common reason (2 of 2): "
        "ValueError: bad data"
    )
    # The summary says how to run them again.
    assert any(line.endswith("--retry-failed") and "2 failed trial(s)" in line for line in lines)
    # A rerun that runs nothing is not a failure of that run.
    assert run(write_study(doc)) is not None


def test_by_default_the_first_trials_failing_alike_stop_the_run(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    doc = toy(unique_name, [{"do": "raise", "type": "ValueError", "message": "typo"}])
    doc["study"]["n_trials"] = 8
    lines: list[str] = []
    with pytest.raises(StudyStopped, match="the first 3 trials of this run all failed"):
        run(write_study(doc), lines=lines)
    study = optuna.load_study(
        study_name=unique_name, storage=load_spec(write_study(doc)).study.storage
    )
    assert [t.state for t in study.trials] == [State.FAIL] * 3
    # The stop message is the run's error, printed once by whoever reports it (the CLI).
    assert not any("the first 3 trials" in line for line in lines)


def test_retry_failed_reruns_each_failed_trial_once_within_n_trials(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    broken = toy(unique_name, [{"do": "raise", "message": "missing file"}])
    path = write_study(broken)
    with pytest.raises(StudyStopped):
        run(path)
    first = optuna.load_study(study_name=unique_name, storage=load_spec(path).study.storage)
    failed_params = [t.params for t in first.trials]

    fixed = toy(unique_name, [{"do": "curve", "values": [0.5]}])
    write_study(fixed)
    lines: list[str] = []
    spec = load_spec(path)
    study = StudyRunner(spec, retry_failed=True, out=lines.append).run()
    assert "--retry-failed: trial(s) 0, 1 enqueued again" in lines
    trials = study.trials
    assert [t.state for t in trials] == [State.FAIL, State.FAIL, State.COMPLETE, State.COMPLETE]
    assert [t.params for t in trials[2:]] == failed_params
    assert [t.user_attrs.get("retry_of") for t in trials[2:]] == [0, 1]
    assert "reason" not in trials[2].user_attrs  # the failed attempt's attrs stay with it
    # Counted within n_trials: the copies took the failures' places; nothing more runs.
    again: list[str] = []
    StudyRunner(load_spec(path), retry_failed=True, out=again.append).run()
    assert "--retry-failed: no failed trial to retry" in again
    assert any("already has 2/2 trials" in line for line in again)
    assert len(optuna.load_study(study_name=unique_name, storage=spec.study.storage).trials) == 4
    # status counts the budget as run does (issue 18, item 4), not 4/2.
    opened = StudyAt.of(spec).load()
    status = read_status(opened.storage, opened.study_id, spec)
    assert status.finished == 2 and "2/2 trials finished" in format_status(status)
    assert "2 failed and retried (not counted)" in format_status(status)


def test_an_unusable_runs_dir_is_bad_input_before_the_study_is_written(
    write_study: Callable[..., Path], unique_name: str, tmp_path: Path
) -> None:
    (tmp_path / "runs").write_text("a file where a folder should be")
    doc = toy(unique_name, [{"do": "curve"}], trials={"runs_dir": "runs/here"})
    from dvt_hpo.exceptions import SpecError

    with pytest.raises(SpecError) as bad:
        run(write_study(doc))
    assert bad.value.field == "trials.runs_dir" and "is a file" in str(bad.value)
    assert not list(tmp_path.glob("*.db"))
    # validate and run (check_runnable) say it with the line.
    with pytest.raises(SpecError) as checked:
        load_runnable(write_study(doc))
    assert checked.value.line is not None and checked.value.field == "trials.runs_dir"


# Each step of a trial's bookkeeping the loop and a trial's thread go through.
BOOKKEEPING = [
    "dvt_hpo.study.trial_run.TrialRun.payload",
    "dvt_hpo.study.trial_run.TrialRun._run",
    "dvt_hpo.study.trial_run.TrialRun._conclude",
    "dvt_hpo.study.trial_run.TrialRun._record",
    "dvt_hpo.study.handle.StudyHandle.set_trial_attrs",
    "dvt_hpo.study.recorder.Recorder.record",
    "dvt_hpo.study.recorder.Recorder.apply_keep_logs",
    "dvt_hpo.study.supervisor.ProcessSupervisor.run",
    "dvt_hpo.study.starter.TrialStarter.launch",
    "dvt_hpo.study.trial_run.TrialRun.start",
    "dvt_hpo.study.trial_run.TrialRun.on_report",
    "dvt_hpo.process.launch.Launcher.start",
    "dvt_hpo.recovery.retries.record_heartbeat",
    "dvt_hpo.recovery.retries.reconcile",
    "dvt_hpo.recovery.retries.enqueue_retries",
    "dvt_hpo.recovery.stale.stale_trials",
    "dvt_hpo.recovery.retries.retried_trial_number",
    "dvt_hpo.budget.ledger.Ledger.refresh",
    "dvt_hpo.budget.ledger.Ledger.budget",
    "dvt_hpo.sampling.space.sample",
    "dvt_hpo.sampling.space.apply",
    "dvt_hpo.store.trial_config.store_base",
    "dvt_hpo.study.loop.StudyRunner._record",
    "dvt_hpo.study.loop.StudyRunner.print_summary",
]


@pytest.mark.parametrize(
    "target", BOOKKEEPING, ids=lambda t: t.rsplit(".", 2)[-2] + "." + t.rsplit(".", 1)[-1]
)
def test_an_exception_in_any_bookkeeping_step_ends_the_trial_or_the_run(
    write_study: Callable[..., Path],
    unique_name: str,
    target: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hits: list[str] = []  # appended from the loop's and the trials' threads

    def broken(*args: Any, **kwargs: Any) -> Any:
        hits.append(threading.current_thread().name)
        raise OSError(f"injected in {target}")

    monkeypatch.setattr(target, broken)
    doc = toy(unique_name, [{"do": "curve", "values": [0.1, 0.2]}], trials={"warm": False})
    spec = load_spec(write_study(doc))
    ended = threading.Event()
    errors: list[BaseException] = []

    def go() -> None:
        try:
            StudyRunner(spec, out=lambda line: None).run()
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            errors.append(exc)
        finally:
            ended.set()

    threading.Thread(target=go, daemon=True).start()
    assert ended.wait(60), f"the run hung with an exception in {target}"
    # Else this test would pass for a step the run no longer goes through.
    assert hits, f"the run never called {target}: the fault was not injected"
    if errors:
        # The run ended with one line (the CLI's exit 1), never an unexpected exception type.
        (error,) = errors
        assert isinstance(error, StudyStopped), repr(error)
    study = (
        optuna.load_study(study_name=unique_name, storage=spec.study.storage)
        if _exists(spec)
        else None
    )
    if study is not None:
        # No trial is left RUNNING for a later run to wait on.
        assert not study.get_trials(states=(State.RUNNING,)), [
            (t.number, t.state) for t in study.trials
        ]


def _exists(spec: Any) -> bool:
    try:
        optuna.load_study(study_name=spec.study.name, storage=spec.study.storage)
    except KeyError:
        return False
    return True


def _params(study: optuna.Study) -> list[float]:
    return [t.params["x"] for t in sorted(study.trials, key=lambda t: t.number)]


def test_a_seeded_single_worker_is_reproducible_and_a_resume_does_not_replay(
    write_study: Callable[..., Path], tmp_path: Path
) -> None:
    def study(name: str, n: int) -> optuna.Study:
        doc = toy(name, [{"do": "curve", "values": [0.5]}], trials={"warm": False})
        doc["study"].update(n_trials=n, storage=f"sqlite:///{name}.db")
        return run(write_study(doc, f"{name}.yaml"))

    first = _params(study("a", 2))
    assert _params(study("b", 2)) == first  # same seed, fresh study: same params
    resumed = _params(study("a", 4))
    assert resumed[:2] == first
    assert not set(resumed[2:]) & set(first)  # the resume continues, no replay


@pytest.mark.parametrize("n_workers", [2, 4])
def test_seeded_workers_started_together_never_run_the_same_params(
    postgres_url: str,
    write_study: Callable[..., Path],
    unique_name: str,
    n_workers: int,
    tmp_path: Path,
) -> None:
    doc = toy(unique_name, [{"do": "curve", "values": [0.5]}], trials={"warm": False})
    doc["study"].update(storage=postgres_url, n_trials=2 * n_workers)
    path = write_study(doc)
    # The study exists before they start, as it does for workers started on a team's database.
    optuna.create_study(storage=postgres_url, study_name=unique_name, direction="maximize")
    try:
        # Every worker imports first, then waits at one flock gate that opens for all at once:
        # they ask their first trials together however slow their start-up was.
        finished = run_gated(
            [["cli", "run", str(path)]] * n_workers, tmp_path / "gate", timeout_s=240
        )
        assert [f.returncode for f in finished] == [0] * n_workers, [f.output for f in finished]
        study = optuna.load_study(study_name=unique_name, storage=postgres_url)
        by_number = {t.number: t for t in study.trials}
        # A retry copy (a trial failed as stale, under load) runs its original's params by
        # design; every other trial was sampled, and no two sampled the same.
        sampled = [t for t in study.trials if retried_trial_number(t) is None]
        for t in study.trials:
            original = retried_trial_number(t)
            if original is not None:
                assert t.params == by_number[original].params, (t.number, original)
        params = [t.params["x"] for t in sampled if "x" in t.params]
        assert len(params) >= 2 * n_workers
        assert len(set(params)) == len(params), [(t.number, t.state, t.params) for t in sampled]
    finally:
        optuna.delete_study(study_name=unique_name, storage=postgres_url)


def test_a_resumed_run_says_which_trials_it_waits_for_and_how_long(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    doc = toy(unique_name, [{"do": "curve", "values": [0.5]}], trials={"warm": False})
    doc["study"].update(n_trials=1, grace_period_s=3, heartbeat_interval_s=1)
    path = write_study(doc)
    spec = load_spec(path)
    # An orchestrator that asked trial 0, beat once and died (kill -9).
    from dvt_hpo.recovery.retries import record_heartbeat
    from dvt_hpo.store.storage import HeartbeatSettings

    opened = StudyAt(spec.study.storage, unique_name).create_or_load(
        ["maximize"], heartbeat=HeartbeatSettings(1, 3, 1)
    )
    storage, dead = opened.storage, opened.study
    trial = dead.ask()
    trial.suggest_float("x", 0.0, 1.0)
    record_heartbeat(storage, trial._trial_id)

    lines: list[str] = []
    study = run(path, lines=lines)
    start = next(line for line in lines if line.startswith(f"study {unique_name!r}"))
    assert "maximize score (best of epochs)" in start and "0/1 trials done" in start, start
    waiting = [line for line in lines if line.startswith("waiting for")]
    assert len(waiting) == 1, lines
    assert "trial 0 (last heartbeat" in waiting[0] and "study.grace_period_s=3" in waiting[0]
    # Then it was failed as stale and its copy ran here.
    assert [t.state for t in study.trials] == [State.FAIL, State.COMPLETE]
    assert study.trials[1].params == study.trials[0].params


def test_two_workers_that_opened_the_study_together_sample_different_params(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    # The race of the PostgreSQL test above, made certain: both workers open the study (and
    # see the same number of trials) before either asks for one.
    from dvt_hpo.devices import slots as devices

    doc = toy(unique_name, [{"do": "curve", "values": [0.5]}], trials={"warm": False})
    doc["study"]["n_trials"] = 4
    spec = load_spec(write_study(doc))
    workers = [StudyRunner(spec, out=lambda line: None) for _ in range(2)]
    for worker in workers:
        worker.open_study()
    slot = devices.split_devices("cpu", 1)[0]
    try:
        for worker in workers:
            starter = TrialStarter(
                worker.handle, worker.ledger, worker.config_key, worker.running, lambda line: None
            )
            assert starter.launch(slot, None)
    finally:
        for worker in workers:
            for _ in list(worker.running):
                worker.events.get(timeout=60)
            worker.launcher.close()
    study = optuna.load_study(study_name=unique_name, storage=spec.study.storage)
    first, second = (t.params["x"] for t in study.trials)
    assert first != second


def test_a_grid_used_up_by_the_budget_records_every_trial_complete(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    """The grid sampler calls study.stop() when its grid is used up, which Optuna raises outside
    Study.optimize after the trial was recorded: the trial is COMPLETE, the run ends normally."""
    doc = toy(unique_name, [{"do": "curve", "values": [0.5]}])
    doc["study"]["sampler"] = {"kind": "grid"}
    doc["search_space"] = [
        {"name": "c", "path": "c", "kind": "categorical", "choices": [1, 2], "new_key": True}
    ]
    lines: list[str] = []
    study = run(write_study(doc), lines=lines)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"], lines
    assert not any("Study.stop" in line for line in lines), lines


def test_a_plateau_ends_the_run_with_exit_0_and_a_rerun_searches_on(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    # Every trial scores 0.3: the first sets the best, the next 3 cannot improve it.
    doc = toy(unique_name, [{"do": "curve", "values": [0.3]}])
    doc["study"].update(n_trials=20, plateau={"trials": 3, "min_delta": 0.0})
    path = write_study(doc)
    lines: list[str] = []
    study = run(path, lines=lines)
    assert len(study.trials) == 4
    assert all(t.state == State.COMPLETE for t in study.trials)
    said = [line for line in lines if "study.plateau reached" in line]
    assert len(said) == 1 and "last 3 finished trials" in said[0]
    # A rerun gets 3 new trials to beat the study's best, then stops again, exit 0.
    proc = run_dvt_hpo("run", path, cwd=Path.cwd(), timeout_s=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "study.plateau reached" in proc.stdout
    study = optuna.load_study(study_name=unique_name, storage=load_spec(path).study.storage)
    assert len(study.trials) == 7


def test_a_trial_another_worker_failed_as_stale_before_its_launch_does_not_end_the_run(
    write_study: Callable[..., Path], unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On an overloaded machine another worker's sweep can fail a trial between this worker's
    # ask and its launch (its heartbeat looked stale). That worker recorded it and queued its
    # copy; this one must go on, not end its run with an orchestrator error.
    from dvt_hpo.optuna_api.private import trial_id_of
    from dvt_hpo.recovery import kill_points
    from dvt_hpo.recovery import retries as recovery

    doc = toy(unique_name, [{"do": "curve", "values": [0.5]}])
    spec = load_spec(write_study(doc))
    optuna.create_study(storage=spec.study.storage, study_name=unique_name, direction="maximize")
    other = StudyAt.of(spec).load()  # the other worker's own connection
    reached = kill_points.reached
    swept: list[int] = []

    def sweep_at_ask(step: str) -> None:
        reached(step)
        if step == "ask" and not swept:
            (trial,) = other.study.get_trials(states=(State.RUNNING,))
            swept.append(trial.number)
            assert recovery.fail_attempt(
                other.study, other.storage, trial_id_of(trial), retry=True, max_retries=1
            )

    monkeypatch.setattr(kill_points, "reached", sweep_at_ask)
    lines: list[str] = []
    study = StudyRunner(spec, out=lines.append).run()  # raised StudyStopped before
    by_number = {t.number: t for t in study.trials}
    assert swept == [0]
    assert by_number[0].state == State.FAIL
    copy = next(t for t in study.trials if retried_trial_number(t) == 0)
    assert copy.state == State.COMPLETE
    assert sum(t.state == State.COMPLETE for t in study.trials) == 2  # n_trials: 2
    said = [line for line in lines if "ended by another worker before it started" in line]
    assert len(said) == 1, lines
    assert said[0].startswith("trial 0 was ended") and "copy is queued for a retry" in said[0]
    assert "study.grace_period_s=3 s" in said[0]


def test_a_ctrl_c_during_the_ask_still_records_the_asked_trial_for_a_retry(
    write_study: Callable[..., Path], unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Optuna's ask commits the new RUNNING trial, then reads it back: a Ctrl-C in between
    # used to leave it RUNNING, unknown to its worker, until its start time went stale.
    doc = toy(unique_name, [{"do": "curve", "values": [0.5]}])
    spec = load_spec(write_study(doc))
    ask = optuna.Study.ask

    def ask_then_ctrl_c(self: optuna.Study, *args: Any, **kwargs: Any) -> optuna.Trial:
        trial = ask(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # lands before ask returns to the loop
        for _ in range(1000):
            pass
        return trial

    monkeypatch.setattr(optuna.Study, "ask", ask_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        StudyRunner(spec, out=lambda line: None).run()
    monkeypatch.undo()
    study = optuna.load_study(study_name=unique_name, storage=spec.study.storage)
    states = sorted(t.state.name for t in study.trials)
    assert states == ["FAIL", "WAITING"], states  # the attempt failed, its copy queued
