"""Starting a trial, on a real study without a trial process: an attempt asked past
``study.n_trials`` is closed unrun, and a trial ended elsewhere before its launch is let go;
and, with trial processes, a sampler slower than the heartbeat grace period fails no trial as
stale (the sampling holds the study lock only around its storage calls, and the trial being
sampled has its heartbeats). Trials that do start run in every test of
tests/study/test_loop.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest

from dvt_hpo.devices.slots import Slot
from dvt_hpo.store.errors import OutageRetry
from dvt_hpo.study.loop import StudyRunner
from dvt_hpo.study.setup import open_for_run
from dvt_hpo.study.starter import TrialStarter
from dvt_hpo.study.sweeper import Sweeper
from dvt_hpo.study.trial_run import TrialRun
from dvt_hpo.studyfile import load_spec
from tests.conftest import run_keeping_failures, toy_study


def test_an_attempt_past_n_trials_is_closed_and_never_counted(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    spec = load_spec(write_study(toy_study(unique_name, study={"n_trials": 1})))
    runner = StudyRunner(spec, out=lambda line: None)
    runner.open_study()
    done = runner.study.ask()
    runner.study.tell(done, 1.0)
    running: dict[int, TrialRun] = {}
    lines: list[str] = []
    starter = TrialStarter(runner.handle, runner.ledger, runner.config_key, running, lines.append)
    assert starter.launch(Slot(0, "", 1), None) is False
    assert running == {}
    extra = runner.study.trials[-1]
    assert extra.state.name == "FAIL"
    assert extra.user_attrs["status"] == "over-budget"
    assert runner.budget().used == 1


class _WaitingSampler(optuna.samplers.RandomSampler):
    """Random, but trial 1's params wait for ``released``: a model fitting for longer than the
    heartbeat grace period, while trial 0 runs."""

    def __init__(self, began: threading.Event, released: threading.Event) -> None:
        super().__init__(seed=0)
        self.began, self.released = began, released

    def sample_independent(
        self,
        study: optuna.Study,
        trial: optuna.trial.FrozenTrial,
        param_name: str,
        param_distribution: optuna.distributions.BaseDistribution,
    ) -> Any:
        if trial.number == 1 and not self.began.is_set():
            self.began.set()
            assert self.released.wait(60), "the other worker never swept past the grace period"
        return super().sample_independent(study, trial, param_name, param_distribution)


@pytest.mark.processes
@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_a_slow_ask_leaves_no_trial_stale(
    write_study: Callable[..., Path],
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Trial 0 runs (held at a gate) while trial 1's params take longer than the grace period
    # to sample; another worker sweeps all along and fails whatever it finds stale.
    gate = tmp_path / "gate"
    actions = [{"do": "wait_file", "path": str(gate)}, {"do": "curve"}]
    doc = toy_study(
        unique_name,
        study={"storage": "sqlite:///slow.db", "heartbeat_interval_s": 1, "grace_period_s": 3},
        trials={"parallel": 2, "devices": "cpu", "timeout_s": 60},
        trainer={"config": {"curve": [0.1, 0.2], "actions": actions}},
    )
    spec = load_spec(write_study(doc))
    began, released = threading.Event(), threading.Event()
    monkeypatch.setattr(
        "dvt_hpo.study.starter.reseeded_sampler",
        lambda spec, first_number: _WaitingSampler(began, released),
    )
    opened = open_for_run(spec, allow_space_change=False, out=lambda line: None)
    db = OutageRetry(spec.study.storage, 5, out=lambda line: None)
    other = Sweeper(spec, opened.study, opened.storage, threading.RLock(), threading.RLock, db, {})
    grace_s = spec.study.grace_period_s + spec.study.heartbeat_interval_s
    done = threading.Event()

    def other_worker() -> None:
        began_at = None
        while not done.is_set():
            other.sweep()
            if began.is_set():
                began_at = began_at or time.monotonic()
                # Swept past the grace (and a missed beat) since the sampling began: let it end.
                if time.monotonic() - began_at > grace_s + 0.5:
                    gate.touch()
                    released.set()
            done.wait(0.25)

    watcher = threading.Thread(target=other_worker, daemon=True)
    watcher.start()
    lines: list[str] = []
    try:
        study = run_keeping_failures(spec, lines)
    finally:
        done.set()
        watcher.join()
        print("\n".join(lines))
    assert released.is_set()
    assert [t.state.name for t in study.get_trials(deepcopy=False)] == ["COMPLETE", "COMPLETE"]
