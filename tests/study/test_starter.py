"""Starting a trial, on a real study without a trial process: an attempt asked past
``study.n_trials`` is closed unrun, and a trial ended elsewhere before its launch is let go.
Trials that do start run in every test of tests/study/test_loop.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dvt_hpo.devices.slots import Slot
from dvt_hpo.study.loop import StudyRunner
from dvt_hpo.study.starter import TrialStarter
from dvt_hpo.study.trial_run import TrialRun
from dvt_hpo.studyfile import load_spec
from tests.conftest import toy_study


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
