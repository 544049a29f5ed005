"""One trial's run through the real study loop: what it records, which PYTHONPATH it gets, and
a result that wins over the timeout."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest

from dvt_hpo import run_study
from dvt_hpo.exceptions import StudyStopped
from dvt_hpo.studyfile import load_spec
from tests.conftest import toy_study


@pytest.mark.processes
def test_a_trial_records_its_history_and_run_attrs(
    write_study: Callable[..., Path], unique_name: str
) -> None:
    curve = [{"score": 0.1, "loss": 2.0}, {"score": 0.3, "loss": 1.0}, {"score": 0.2}]
    doc = toy_study(unique_name, study={"n_trials": 1})
    doc["trainer"]["config"] = {"curve": curve}
    study = run_study(write_study(doc), out=lambda line: None)
    attrs = study.trials[0].user_attrs
    assert attrs["history"] == {
        "score": [[0, 0.1], [1, 0.3], [2, 0.2]],
        "loss": [[0, 2.0], [1, 1.0]],
    }
    assert (attrs["epochs_reported"], attrs["last_step"], attrs["status"]) == (3, 2, "ok")
    assert attrs["exit"] == "exit code 0" and attrs["duration_s"] > 0
    assert attrs["host"] and Path(attrs["log_dir"]).is_dir()
    assert study.trials[0].intermediate_values == {0: 0.1, 1: 0.3, 2: 0.2}


@pytest.mark.processes
def test_a_result_written_before_the_timeout_wins(
    write_study: Callable[..., Path], unique_name: str, tmp_path: Path
) -> None:
    # The entry point returns at once but a stray non-daemon thread keeps its interpreter up
    # past trials.timeout_s: the trial finished its work and must be COMPLETE, not FAIL.
    (tmp_path / "lingering.py").write_text(
        textwrap.dedent(
            """
            import threading, time

            def run(config, ctx):
                ctx.report(0, {"score": 0.7})
                threading.Thread(target=time.sleep, args=(30,)).start()
                return {"score": 0.7}
            """
        )
    )
    doc = toy_study(unique_name, study={"n_trials": 1}, trials={"timeout_s": 3, "stop_grace_s": 1})
    doc["trainer"]["entrypoint"] = "lingering:run"
    study = run_study(write_study(doc), out=lambda line: None)
    trial = study.trials[0]
    assert (trial.state.name, trial.value) == ("COMPLETE", 0.7), trial.user_attrs.get("reason")
    assert len(study.trials) == 1  # no retry of a finished trial


@pytest.mark.processes
def test_trials_import_from_the_study_folder_never_the_working_directory(
    write_study: Callable[..., Path],
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    study_dir = tmp_path / "study"
    elsewhere = tmp_path / "elsewhere"
    study_dir.mkdir()
    elsewhere.mkdir()
    (study_dir / "where.py").write_text(
        textwrap.dedent(
            """
            import os

            def run(config, ctx):
                ctx.set_user_attr("pythonpath", os.environ.get("PYTHONPATH", ""))
                ctx.report(0, {"score": 1.0})
            """
        )
    )
    doc = toy_study(unique_name, study={"n_trials": 1})
    doc["trainer"]["entrypoint"] = "where:run"
    path = write_study(doc)
    moved = study_dir / "study.yaml"
    path.rename(moved)
    monkeypatch.chdir(elsewhere)
    study = run_study(moved, out=lambda line: None)
    trial = study.trials[0]
    assert trial.state.name == "COMPLETE", trial.user_attrs.get("reason")
    entries = trial.user_attrs["pythonpath"].split(os.pathsep)
    assert entries[0] == str(study_dir)
    assert str(elsewhere) not in entries and os.getcwd() not in entries
    # The user's own PYTHONPATH (here: the repo, for tests.entrypoints) follows.
    user = [e for e in os.environ["PYTHONPATH"].split(os.pathsep) if e]
    assert entries[1:] == [e for i, e in enumerate(user) if e not in user[:i]]


@pytest.mark.processes
def test_a_trial_speaking_another_protocol_version_fails_once_with_the_reason(
    write_study: Callable[..., Path], unique_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dvt_hpo.wire import protocol

    # This orchestrator now speaks version N+1; the trial process (a fresh interpreter) N.
    monkeypatch.setattr(protocol, "PROTOCOL_VERSION", protocol.PROTOCOL_VERSION + 1)
    doc = toy_study(unique_name, study={"n_trials": 1})
    doc["trainer"]["config"] = {"actions": [{"do": "sleep", "seconds": 60}]}
    path = write_study(doc)
    with pytest.raises(StudyStopped, match="no trial of this run succeeded"):
        run_study(path, out=lambda line: None)
    study = optuna.load_study(study_name=unique_name, storage=load_spec(path).study.storage)
    (trial,) = study.trials  # failed, and not retried: rerunning cannot help
    assert trial.state.name == "FAIL"
    reason = trial.user_attrs["reason"]
    assert reason.startswith(
        f"the trial process speaks dvt-hpo protocol {protocol.PROTOCOL_VERSION - 1}, "
        f"this orchestrator {protocol.PROTOCOL_VERSION}"
    ), reason
    assert trial.user_attrs["duration_s"] < 30  # cut off at hello, not after its sleep
