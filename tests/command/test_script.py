"""``trainer.command`` trials through the real runner: real scripts (tests/entrypoints/cmd_*.py)
reporting with :mod:`dvt_hpo.report` or printing lines for ``trainer.metrics_pattern``; complete,
pruned both ways, failed with the script's own reason, stopped with the trial, under torchrun."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from dvt_hpo.command import script as command
from dvt_hpo.command.script import exit_reason, split_lines
from dvt_hpo.exceptions import CommandFailed
from dvt_hpo.process import tree as process_tree
from dvt_hpo.studyfile import COMMAND_ENTRYPOINT
from dvt_hpo.trial import context
from dvt_hpo.trial.context import LocalContext
from dvt_hpo.wire.payload import CommandPayload
from tests.conftest import REPO_ROOT, run_dvt_hpo, toy_study

PROCESSES = pytest.mark.processes

SCRIPT = str(REPO_ROOT / "tests" / "entrypoints" / "cmd_script.py")
DDP_SCRIPT = str(REPO_ROOT / "tests" / "entrypoints" / "cmd_ddp.py")
LR = {"name": "lr", "path": "lr", "kind": "float", "low": 0.01, "high": 0.1, "log": True}
VAL_LINE = r"epoch (?P<step>\d+) val: loss=(?P<loss>\S+) score=(?P<score>\S+)"
RunStudy = Callable[[dict[str, Any]], optuna.Study]


def command_study(
    name: str, *args: str, config: dict[str, Any] | None = None, **sections: Any
) -> dict[str, Any]:
    """A study of ``cmd_script.py ARGS`` maximizing ``score`` over ``lr``."""
    doc = toy_study(
        name,
        trainer={
            "command": ["{python}", SCRIPT, "--lr={lr}", "--out", "{trial_dir}", *args],
            "config": config or {},
        },
        **{"search_space": [LR], **sections},
    )
    del doc["trainer"]["entrypoint"]
    return doc


def trial_dir(tmp_path: Path, name: str, number: int) -> Path:
    return tmp_path / "runs" / name / f"trial-{number:04d}"


def received(folder: Path, rank: int = 0) -> dict[str, Any]:
    return json.loads((folder / f"received-rank{rank}.json").read_text())


@PROCESSES
def test_a_helper_script_completes_with_the_trial_values_on_its_command_line(
    tmp_path: Path, run_study: RunStudy, unique_name: str
) -> None:
    args = ("--epochs", "{epochs}", "--width", "{width}", "--flag", "{flag}")
    args += ("--tags", "{tags}", "--config", "{config}")
    width = {"name": "width", "path": "net.width", "kind": "int", "low": 4, "high": 9}
    doc = command_study(
        unique_name,
        *args,
        config={"epochs": 2, "flag": True, "tags": ["a", 1], "net": {"width": 1}},
        search_space=[LR, width],
    )
    study = run_study(doc)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
    for trial in study.trials:
        folder = trial_dir(tmp_path, unique_name, trial.number)
        got = received(folder)
        lr = trial.params["lr"]
        assert got["args"]["lr"] == lr  # exact: floats are rendered with repr
        assert got["args"]["width"] == trial.params["width"]
        assert (got["args"]["epochs"], got["args"]["flag"], got["args"]["tags"]) == (
            2,
            "true",
            '["a",1]',
        )
        assert got["args"]["config"] == str(folder / "config.yaml")
        ran = yaml.safe_load((folder / "config.yaml").read_text())
        assert ran["lr"] == lr and ran["net"]["width"] == trial.params["width"]
        assert json.loads((folder / "config.json").read_text()) == ran
        # A child of the trial process, in its process group; the control socket is not its business.
        result = json.loads((folder / "result.json").read_text())
        assert got["pgid"] == result["pid"] and got["pid"] != result["pid"]
        assert got["env"]["DVT_HPO_CONTROL"] is None
        assert trial.intermediate_values == {0: lr, 1: 2 * lr}
        assert trial.value == 2 * lr
        assert trial.user_attrs["last_metrics"] == {"score": 2 * lr, "loss": 1 - 2 * lr}
        payload = json.loads((folder / "payload.json").read_text())
        assert payload["entrypoint"] == COMMAND_ENTRYPOINT
        assert "done" in (folder / "stdout.log").read_text()
        assert trial.user_attrs["warm_start"] is True  # the trial process forked from the template


@PROCESSES
def test_a_printing_script_completes_through_metrics_pattern(
    tmp_path: Path, run_study: RunStudy, unique_name: str
) -> None:
    doc = command_study(unique_name, "--mode", "print", study={"n_trials": 1})
    doc["trainer"]["metrics_pattern"] = VAL_LINE
    (trial,) = run_study(doc).trials
    assert trial.state.name == "COMPLETE", trial.user_attrs.get("reason")
    lr = trial.params["lr"]
    assert trial.intermediate_values == {0: lr, 1: 2 * lr, 2: 3 * lr}
    assert trial.value == 3 * lr
    log = (trial_dir(tmp_path, unique_name, 0) / "stdout.log").read_text()
    # Every line reaches the log, matched or not.
    assert log.count(" train: ") == 3 and log.count(" val: ") == 3 and "done" in log
    # Rerun by hand (no orchestrator): the same command, its matched lines printed as reports.
    env = {k: v for k, v in os.environ.items() if not k.startswith("DVT_HPO")}
    payload = trial_dir(tmp_path, unique_name, 0) / "payload.json"
    rerun = subprocess.run(
        [sys.executable, "-m", "dvt_hpo.trial", str(payload)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rerun.returncode == 0, rerun.stderr
    assert rerun.stdout.count("epoch 2: loss=") == 1 and "done" in rerun.stdout


@PROCESSES
def test_progress_redraws_ended_by_carriage_returns_are_lines_for_the_pattern(
    tmp_path: Path, run_study: RunStudy, unique_name: str
) -> None:
    doc = command_study(unique_name, "--mode", "progress", study={"n_trials": 1})
    doc["trainer"]["metrics_pattern"] = VAL_LINE
    (trial,) = run_study(doc).trials
    assert trial.state.name == "COMPLETE", trial.user_attrs.get("reason")
    lr = trial.params["lr"]
    # Up to "done" the script wrote no newline: ended at "\n" only, it was one line and the
    # pattern found step 0 alone.
    assert trial.intermediate_values == {0: lr, 1: 2 * lr, 2: 3 * lr}
    log = (trial_dir(tmp_path, unique_name, 0) / "stdout.log").read_bytes()
    # Copied as written: 5 redraws an epoch, each ended by its "\r".
    assert log.count(b"\r") == 15 and log.count(b"\n") == 1 and log.endswith(b"\rdone\n")
    assert f"epoch 2 val: loss={1 - 3 * lr!r} score={3 * lr!r}\r".encode() in log


PRUNE_AT_FIRST = {"n_trials": 1, "pruner": {"kind": "threshold", "lower": 0.9}}


@PROCESSES
def test_the_helper_ends_a_pruned_script_with_system_exit(
    tmp_path: Path, run_study: RunStudy, unique_name: str
) -> None:
    doc = command_study(unique_name, "--epochs", "5", study=PRUNE_AT_FIRST)
    (trial,) = run_study(doc).trials
    assert trial.state.name == "PRUNED", trial.user_attrs.get("reason")
    assert trial.user_attrs["pruned_step"] == 0
    log = (trial_dir(tmp_path, unique_name, 0) / "stdout.log").read_text()
    assert "finished epoch 0" not in log  # report() raised SystemExit at the pruned step


@PROCESSES
def test_metrics_pattern_pruning_stops_the_script(
    tmp_path: Path, run_study: RunStudy, unique_name: str
) -> None:
    doc = command_study(unique_name, "--mode", "print", "--sleep", "30", study=PRUNE_AT_FIRST)
    doc["trainer"]["metrics_pattern"] = VAL_LINE
    (trial,) = run_study(doc).trials
    assert trial.state.name == "PRUNED", trial.user_attrs.get("reason")
    assert trial.user_attrs["duration_s"] < 20  # SIGTERM, not the 30 s sleep
    folder = trial_dir(tmp_path, unique_name, 0)
    assert "finished epoch 0" not in (folder / "stdout.log").read_text()
    assert not process_tree.pid_alive(received(folder)["pid"])


@PROCESSES
def test_a_redraw_ended_by_a_carriage_return_is_matched_before_the_next_output(
    tmp_path: Path, run_study: RunStudy, unique_name: str
) -> None:
    doc = command_study(unique_name, "--mode", "progress", "--sleep", "30", study=PRUNE_AT_FIRST)
    doc["trainer"]["metrics_pattern"] = VAL_LINE
    (trial,) = run_study(doc).trials
    assert trial.state.name == "PRUNED", trial.user_attrs.get("reason")
    assert trial.user_attrs["pruned_step"] == 0
    assert trial.user_attrs["duration_s"] < 30  # pruned at the "\r", not after the 30 s sleep
    log = (trial_dir(tmp_path, unique_name, 0) / "stdout.log").read_text()
    assert "finished epoch 0" not in log


@PROCESSES
def test_a_script_that_ignores_the_prune_is_killed(
    tmp_path: Path, run_study: RunStudy, unique_name: str
) -> None:
    doc = command_study(
        unique_name,
        "--mode",
        "stubborn",
        "--sleep",
        "30",
        study=PRUNE_AT_FIRST,
        trials={"stop_grace_s": 1},
    )
    (trial,) = run_study(doc).trials
    assert trial.state.name == "PRUNED", trial.user_attrs.get("reason")
    folder = trial_dir(tmp_path, unique_name, 0)
    assert "ignoring the prune" in (folder / "stdout.log").read_text()
    assert trial.user_attrs["duration_s"] < 20
    assert not process_tree.pid_alive(received(folder)["pid"])


@PROCESSES
@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("crash", "command exited with 1: ValueError: bad lr "),
        ("signal", "command was killed by SIGKILL (nothing on stderr)"),
        ("silent", "objective.metric 'score' was never reported; the trial reported ['other']"),
        ("twice", "command exited with 1: ValueError: step 0 was already reported; report each"),
    ],
)
def test_a_failed_script_fails_the_trial_with_one_line_naming_why(
    tmp_path: Path, run_study: RunStudy, unique_name: str, mode: str, reason: str
) -> None:
    doc = command_study(unique_name, "--mode", mode, study={"n_trials": 1})
    (trial,) = run_study(doc).trials
    assert trial.state.name == "FAIL"
    assert trial.user_attrs["reason"].startswith(reason), trial.user_attrs["reason"]
    assert "\n" not in trial.user_attrs["reason"]
    if mode == "crash":
        # The script's own traceback is what the trial keeps, not the trial process's.
        assert 'cmd_script.py", line' in trial.user_attrs["stderr_tail"]
        assert "traceback" not in trial.user_attrs


@PROCESSES
def test_a_pattern_matching_two_lines_of_a_step_fails_the_trial_naming_them(
    tmp_path: Path, run_study: RunStudy, unique_name: str
) -> None:
    doc = command_study(unique_name, "--mode", "print", "--sleep", "30", study={"n_trials": 1})
    doc["trainer"]["metrics_pattern"] = r"epoch (?P<step>\d+) \w+: loss=(?P<loss>[0-9.]+)"
    (trial,) = run_study(doc).trials
    assert trial.state.name == "FAIL"
    assert trial.user_attrs["reason"].startswith(
        "trainer.metrics_pattern matched stdout line 2 'epoch 0 val: loss="
    )
    assert (
        "step 0 was already matched on line 1; make the pattern match one line per step"
        in (trial.user_attrs["reason"])
    )
    assert trial.user_attrs["duration_s"] < 20  # stopped at once, not after its 30 s sleep


@PROCESSES
def test_a_trial_timeout_stops_the_script_too(
    tmp_path: Path, run_study: RunStudy, unique_name: str
) -> None:
    doc = command_study(
        unique_name,
        "--epochs",
        "1",
        "--sleep",
        "60",
        study={"n_trials": 1},
        trials={"timeout_s": 3, "stop_grace_s": 2},
    )
    (trial,) = run_study(doc).trials
    assert trial.state.name == "FAIL"
    assert trial.user_attrs["reason"].startswith("timed out after trials.timeout_s=3 s")
    assert not process_tree.pid_alive(received(trial_dir(tmp_path, unique_name, 0))["pid"])


@PROCESSES
def test_a_command_runs_on_each_torchrun_rank_and_rank_0_reports(
    tmp_path: Path, run_study: RunStudy, unique_name: str
) -> None:
    doc = toy_study(
        unique_name,
        study={"n_trials": 1},
        trials={"launcher": "torchrun", "nproc_per_node": 2, "devices": "cpu", "timeout_s": 120},
        trainer={"command": ["{python}", DDP_SCRIPT, "--lr", "{lr}", "--out", "{trial_dir}"]},
        search_space=[LR],
    )
    del doc["trainer"]["entrypoint"]
    (trial,) = run_study(doc).trials
    assert trial.state.name == "COMPLETE", trial.user_attrs.get("reason")
    lr = trial.params["lr"]
    assert trial.intermediate_values == {0: lr, 1: 2 * lr}  # rank 0's values, not rank 1's
    assert trial.user_attrs["last_metrics"]["ranks_sum"] == 3.0  # the all-reduce ran
    folder = trial_dir(tmp_path, unique_name, 0)
    for rank in (0, 1):
        seen = json.loads((folder / f"ddp-rank{rank}.json").read_text())
        assert seen["world"] == 2
        assert (seen["env"]["RANK"], seen["env"]["LOCAL_RANK"]) == (str(rank), str(rank))


STREAM = b"epoch 0 1/3\repoch 0 3/3\r\nval=0.5\r\rnext\n\nlast"
STREAM_LINES = [
    b"epoch 0 1/3\r",
    b"epoch 0 3/3\r\n",
    b"val=0.5\r",
    b"\r",
    b"next\n",
    b"\n",
    b"last",
]


def test_split_lines_ends_lines_at_newline_carriage_return_or_both() -> None:
    pieces = list(split_lines([STREAM], 64))
    assert pieces == [(line, True) for line in STREAM_LINES]


def test_split_lines_gives_the_same_lines_however_reads_cut_the_stream() -> None:
    expected = [line.rstrip(b"\r\n") for line in STREAM_LINES]
    for cut in range(1, len(STREAM)):
        chunks = [STREAM[:cut], STREAM[cut:]]
        pieces = list(split_lines(chunks, 64))
        assert b"".join(piece for piece, _ in pieces) == STREAM, cut
        lines = [piece.rstrip(b"\r\n") for piece, is_line in pieces if is_line]
        assert lines == expected, cut
    # A "\r" ending a read is a line end at once; the "\n" that follows it is no new line.
    assert list(split_lines([b"a=1\r", b"\nb"], 64)) == [
        (b"a=1\r", True),
        (b"\n", False),
        (b"b", True),
    ]


def test_split_lines_cuts_a_line_without_an_end_at_max_bytes() -> None:
    assert list(split_lines([b"ab", b"cdefghij\r"], 4)) == [
        (b"abcd", True),
        (b"efgh", True),
        (b"ij\r", True),
    ]
    # A "\r\n" across the cap is still one line end.
    assert list(split_lines([b"abc\r\nd"], 4)) == [(b"abc\r\n", True), (b"d", True)]


def test_exit_reason_names_the_code_or_the_signal() -> None:
    assert exit_reason(3, "ValueError: bad") == "command exited with 3: ValueError: bad"
    assert exit_reason(-11, "") == "command was killed by SIGSEGV (nothing on stderr)"


@PROCESSES
def test_the_helper_prints_when_the_script_runs_by_hand(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DVT_HPO")}
    out = subprocess.run(
        [sys.executable, SCRIPT, "--lr", "0.25", "--epochs", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert out.splitlines() == [
        "step 0: score=0.25 loss=0.75",
        "finished epoch 0",
        "step 1: score=0.5 loss=0.5",
        "finished epoch 1",
        "done",
    ]


@PROCESSES
def test_the_example_study_runs_shortened(tmp_path: Path) -> None:
    """studies/command-trainer (8 trials, about a minute on 2 busy cores) as 2 short trials."""

    example = REPO_ROOT / "studies" / "command-trainer"
    for name in ("study.yaml", "train.py"):
        shutil.copy(example / name, tmp_path / name)
    argv = ["run", "study.yaml", "--set", "study.n_trials=2", "--set", "trainer.config.epochs=2"]
    proc = run_dvt_hpo(*argv, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    study = optuna.load_study(
        study_name="command-trainer-digits", storage=f"sqlite:///{tmp_path}/command-trainer.db"
    )
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
    for trial in study.trials:
        assert sorted(trial.intermediate_values) == [0, 1]
        assert 0.0 < trial.value <= 1.0
        assert trial.user_attrs["last_metrics"]["loss"] > 0

    # best --export writes the trial's command, and `dvt-hpo train` reruns it to its value
    # (issue 18, item 7): today's argv with the params filled in, its folder and threads.
    best = study.best_trial
    exported = tmp_path / "out" / "best.yaml"
    exported.parent.mkdir()
    shown = run_dvt_hpo(
        "best", "study.yaml", "--set", "trainer.config.epochs=2", "--export", exported, cwd=tmp_path
    )
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"dvt-hpo train {exported}" in shown.stdout
    data = yaml.safe_load(exported.read_text())
    assert data["command"][:2] == [sys.executable, "train.py"]
    assert data["command"][data["command"].index("--lr") + 1] == repr(best.params["lr"])
    assert data["cwd"] == str(tmp_path) and data["trial"] == best.number
    assert data["env"]["OMP_NUM_THREADS"] == str(best.user_attrs["threads"])
    rerun = run_dvt_hpo("train", exported, cwd=exported.parent)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    f1 = [float(v) for v in re.findall(r"^step \d+: .*macro_f1=(\S+)", rerun.stdout, re.M)]
    assert len(f1) == 2 and max(f1) == float(f"{best.value:.6g}"), rerun.stdout


@PROCESSES
def test_a_script_killed_by_the_trials_stop_is_a_stop_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The trial process's TrialStopped was dropped (see dvt_hpo.trial.context.note_stop) while it waited
    # for the script, which the same SIGTERM ended: the trial was stopped; it did not fail.
    monkeypatch.setattr(context, "_stop_received", "SIGTERM")
    script = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    with pytest.raises(context.TrialStopped):
        command.run(
            {},
            LocalContext(trial_dir=tmp_path),
            command=CommandPayload(argv=(sys.executable, "-c", script)),
        )
    monkeypatch.setattr(context, "_stop_received", None)
    with pytest.raises(CommandFailed, match="killed by SIGTERM"):
        command.run(
            {},
            LocalContext(trial_dir=tmp_path),
            command=CommandPayload(argv=(sys.executable, "-c", script)),
        )
