"""``dvt-hpo status``: what it reads from a study, its text and JSON, and that it never
creates anything."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from dvt_hpo.cli import EXIT_FAILURE, EXIT_OK, main
from dvt_hpo.store.opening import StudyAt
from dvt_hpo.studyfile import load_spec
from dvt_hpo.views.status import format_status, last_report, read_status
from tests.conftest import REPO_ROOT, toy_study
from tests.made_study import make_study


def test_status_reads_counts_best_running_and_failures(tmp_path: Path) -> None:
    spec = make_study(tmp_path)
    opened = StudyAt.of(spec).load()
    status = read_status(opened.storage, opened.study_id, spec)

    assert status.counts == {"RUNNING": 1, "WAITING": 0, "COMPLETE": 4, "PRUNED": 1, "FAIL": 1}
    assert status.best is not None
    assert (status.best.number, status.best.value, status.best.batch_size) == (3, 0.93, 256)
    assert set(status.best.params) == {"lr", "width"}
    [running] = status.running
    assert (running.number, running.host, running.last_step, running.value) == (6, "gpu-1", 1, 0.4)
    assert running.values == [0.4]
    assert 0 <= running.elapsed_s < 60
    [failure] = status.failures
    assert failure.number == 5
    assert failure.reason == "OutOfMemoryError: CUDA out of memory at batch 512"

    text = format_status(status)
    assert "study 'seeing'" in text and "6/10 trials finished" in text
    assert "best trial 3: score=0.93" in text and "batch=256" in text
    assert "gpu-1  epoch 1  score=0.4  lr=" in text
    assert "CUDA out of memory at batch 512" in text


def test_a_trial_stopped_by_ctrl_c_is_shown_as_stopped_not_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Ctrl-C'd trial (FAIL to Optuna, status: interrupted) is not a failure: counted and
    listed apart, in the text and in --json."""
    spec = make_study(tmp_path, running=False)
    study = optuna.load_study(study_name=spec.study.name, storage=spec.study.storage)
    trial = study.ask()
    trial.set_user_attr("status", "interrupted")
    trial.set_user_attr("reason", "interrupted (the study was stopped)")
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    opened = StudyAt.of(spec).load()
    status = read_status(opened.storage, opened.study_id, spec)
    assert status.counts["FAIL"] == 2 and status.n_stopped == 1
    assert [f.number for f in status.failures] == [5]
    assert [(f.number, f.reason) for f in status.stopped] == [
        (6, "interrupted (the study was stopped)")
    ]
    text = format_status(status)
    assert "1 fail, 1 stopped" in text, text
    stopped, failures = text.index("last stopped"), text.index("last failures:")
    assert "trial    6" in text[stopped:failures] and "trial    6" not in text[failures:], text

    assert main(["status", str(tmp_path / "study.yaml"), "--json"]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert data["n_stopped"] == 1 and [f["number"] for f in data["stopped"]] == [6]
    assert [f["number"] for f in data["failures"]] == [5]


def test_last_report_falls_back_to_intermediate_values(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'x.db'}")
    trial = study.ask()
    trial.report(0.5, 0)
    trial.report(0.25, 3)
    frozen = study.get_trials()[0]
    assert last_report(frozen, "loss") == (3, 0.25)
    # A history of another metric than the objective: the objective's own values still win.
    trial.set_user_attr("history", {"accuracy": [[4, 0.9]]})
    assert last_report(study.get_trials()[0], "loss") == (3, 0.25)
    trial.set_user_attr("history", {"loss": [[4, 0.2]]})
    trial.set_user_attr("last_step", 4)
    assert last_report(study.get_trials()[0], "loss") == (4, 0.2)


def test_status_command_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_study(tmp_path)
    path = tmp_path / "study.yaml"
    assert main(["status", str(path)]) == EXIT_OK
    assert "best trial 3" in capsys.readouterr().out

    assert main(["status", str(path), "--json"]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert data["counts"]["COMPLETE"] == 4
    assert data["best"]["number"] == 3
    assert data["running"][0]["host"] == "gpu-1"
    assert data["failures"][0]["reason"].startswith("OutOfMemoryError")


def test_status_of_a_study_not_run_yet_creates_nothing(
    tmp_path: Path, write_study, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_study(toy_study("never-run"))
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["status", str(path)]) == EXIT_FAILURE
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no study database yet" in err and "never-run.db" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_status_of_a_study_missing_from_its_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = make_study(tmp_path)
    path = tmp_path / "other.yaml"
    path.write_text(spec.path.read_text().replace("name: seeing", "name: other", 1))
    path.write_text(
        path.read_text().replace("study:\n", f"study:\n  storage: {spec.study.storage}\n", 1)
    )
    assert main(["status", str(path)]) == EXIT_FAILURE
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no study named 'other' in this database" in err
    names = optuna.get_all_study_names(storage=spec.study.storage)
    assert names == ["seeing"]


@pytest.mark.processes
def test_status_runs_without_torch(tmp_path: Path) -> None:
    make_study(tmp_path)
    code = (
        "import sys; from dvt_hpo.cli import main; rc = main(['status', sys.argv[1]]); "
        "assert 'torch' not in sys.modules, 'status imported torch'; sys.exit(rc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "study.yaml")],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "best trial 3" in done.stdout


def test_status_without_running_trials_says_so(tmp_path: Path) -> None:
    spec = make_study(tmp_path, running=False)
    opened = StudyAt.of(spec).load()
    status = read_status(opened.storage, opened.study_id, spec)
    assert status.running == [] and status.counts["RUNNING"] == 0
    assert "running:" not in format_status(status)


@pytest.mark.processes
def test_status_of_a_study_with_several_objectives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.tradeoff_study import run_tradeoff, tradeoff_doc

    path, _ = run_tradeoff(tmp_path, tradeoff_doc("mo"))
    opened = StudyAt.of(load_spec(path)).load()
    spec_status = read_status(opened.storage, opened.study_id, load_spec(path))
    assert spec_status.best is None and spec_status.no_feasible is None
    assert spec_status.metrics == ["score", "cost"]
    assert sorted(b.params["x"] for b in spec_status.front) == [0.2, 0.4]
    assert main(["status", str(path)]) == EXIT_OK
    text = capsys.readouterr().out
    assert "4/4 trials finished, maximize score, minimize cost" in text
    assert "Pareto front (2 trial(s), feasible only):" in text and "score=0.4 cost=6  x=0.4" in text
    assert "x=0.8" not in text
    assert main(["status", str(path), "--json"]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert sorted(b["values"] for b in data["front"]) == [
        pytest.approx([0.2, 4.0]),
        pytest.approx([0.4, 6.0]),
    ]


def test_a_running_trial_of_several_objectives_shows_its_last_epoch(tmp_path: Path) -> None:
    study = optuna.create_study(
        storage=f"sqlite:///{tmp_path / 'x.db'}", directions=["maximize", "minimize"]
    )
    trial = study.ask()
    trial.set_user_attr("last_step", 2)
    trial.set_user_attr("last_metrics", {"score": 0.5, "cost": 3.0})
    frozen = study.get_trials()[0]
    assert last_report(frozen, "cost") == (2, 3.0)


def test_status_shows_every_objective_of_a_running_trial(
    tmp_path: Path, write_study, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.tradeoff_study import tradeoff_doc

    path = write_study(tradeoff_doc("mo"))
    spec = load_spec(path)
    study = optuna.create_study(
        study_name="mo", storage=spec.study.storage, directions=["maximize", "minimize"]
    )
    trial = study.ask()
    trial.suggest_categorical("x", [0.2, 0.4, 0.6, 0.8])
    # What the runner stores at each epoch of a multi-objective trial (trial_run.on_report).
    trial.set_user_attr("host", "gpu-1")
    trial.set_user_attr("last_step", 2)
    trial.set_user_attr("last_metrics", {"score": 0.5, "cost": 3.0, "size": 400.0})

    opened = StudyAt.of(spec).load()
    status = read_status(opened.storage, opened.study_id, spec)
    [running] = status.running
    assert (running.last_step, running.value, running.values) == (2, 0.5, [0.5, 3.0])
    assert "epoch 2  score=0.5 cost=3  x=" in format_status(status)

    assert main(["status", str(path), "--json"]) == EXIT_OK
    [shown] = json.loads(capsys.readouterr().out)["running"]
    assert (shown["last_step"], shown["values"]) == (2, [0.5, 3.0])


@pytest.mark.processes
def test_status_never_shows_an_infeasible_best(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.tradeoff_study import run_tradeoff, tradeoff_doc

    single = {
        "metric": "score",
        "direction": "maximize",
        "constraints": [{"metric": "size", "max": 100}],
    }
    path, _ = run_tradeoff(tmp_path, tradeoff_doc("none", single, choices=[0.6, 0.8]))
    assert main(["status", str(path)]) == EXIT_OK
    text = capsys.readouterr().out
    assert "best trial: none feasible: study 'none' has 2 complete trial(s)" in text
    assert "score=0.8" not in text


@pytest.mark.processes
def test_status_json_into_a_pipe_closed_early_ends_quietly(tmp_path: Path) -> None:
    """``dvt-hpo status --json | head``: no BrokenPipeError, no traceback, exit 141 as a tool
    killed by SIGPIPE. The reader here is gone before the status is printed (the interpreter
    takes longer to start than the pipe's read end to close), so the write always fails."""
    make_study(tmp_path)
    status = subprocess.Popen(
        [sys.executable, "-m", "dvt_hpo", "status", "--json", "study.yaml"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert status.stdout is not None and status.stderr is not None
    status.stdout.close()
    err = status.stderr.read().decode()
    assert status.wait(timeout=120) == 141, err
    assert err == "", err
