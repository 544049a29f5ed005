"""The ``dvt-hpo`` commands end to end: exit codes, messages, what is written and when.

Commands run in-process through :func:`dvt_hpo.cli.main` where only their output matters, and
as real ``python -m dvt_hpo`` subprocesses where the process itself is under test (exit codes
of the interpreter, torch staying out of the orchestrator, training in a fresh process). Trials
are always real subprocesses: the torch-free toy entry point, or the built-in trainer on digits.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import yaml

from dvt_hpo import SpecError, run_study
from dvt_hpo.cli import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK, main
from dvt_hpo.config.paths import get_path
from dvt_hpo.studyfile import load_spec
from tests.conftest import REPO_ROOT, merge_sections, run_dvt_hpo, toy_study

QUICKSTART = REPO_ROOT / "studies" / "quickstart.yaml"
# Two 1-epoch trials one after the other: the smallest real study of the built-in trainer.
DIGITS_FAST = ("study.n_trials=2", "trainer.config.epochs=1", "trials.parallel=1")
SUBPROCESS_TIMEOUT_S = 240
TRIAL_LINE = re.compile(r"^trial +(\d+) (COMPLETE|PRUNED|FAIL) +(?:\w+=(\S+))?", re.MULTILINE)
PROCESSES = pytest.mark.processes
BEST_LINE = re.compile(r"^best trial (\d+): (\w+)=(\S+)", re.MULTILINE)


@dataclass
class Result:
    code: int
    out: str
    err: str

    def trials(self) -> list[tuple[int, str, float | None]]:
        """``(number, state, value)`` of every trial line, in order."""
        return [
            (int(n), state, float(value) if value else None)
            for n, state, value in TRIAL_LINE.findall(self.out)
        ]

    def best(self) -> tuple[int, float]:
        found = BEST_LINE.findall(self.out)
        assert len(found) == 1, f"expected one 'best trial' line:\n{self.out}"
        return int(found[0][0]), float(found[0][2])


@pytest.fixture
def cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Result]:
    """``dvt-hpo ARGS`` in this process; paths in messages are relative to the study folder."""

    def call(*argv: str | Path, cwd: Path | None = None) -> Result:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        capsys.readouterr()
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return call


def run_cli(*argv: str | Path, cwd: Path) -> Result:
    """``python -m dvt_hpo ARGS`` in a fresh interpreter."""
    proc = run_dvt_hpo(*argv, cwd=cwd, timeout_s=SUBPROCESS_TIMEOUT_S)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def stored_trials(study_file: Path, *overrides: str) -> list[optuna.trial.FrozenTrial]:
    spec = load_spec(study_file, overrides)
    study = optuna.load_study(study_name=spec.study.name, storage=spec.study.storage)
    return study.get_trials(deepcopy=False)


def curve_study(name: str, **sections: Any) -> dict[str, Any]:
    """A toy study whose trial reports its sampled ``x`` as the score (``curve[0]``)."""
    doc = toy_study(
        name,
        trainer={"entrypoint": "tests.entrypoints.toy:run", "config": {"curve": [0.0]}},
        search_space=[{"name": "x", "path": "curve[0]", "kind": "float", "low": 0.0, "high": 1.0}],
    )
    return merge_sections(doc, sections)


# ---------------------------------------------------------------------------------------------
# validate, and bad input before anything is written

# Lines: 1 study, 2 name, 3 n_trials, 4 storage, 5 objective, 8 trainer, 9 entrypoint, 12 dim.
TOY_TEXT = """\
study:
  name: bad
  n_trials: 2
  storage: sqlite:///bad.db
objective:
  metric: score
  direction: maximize
trainer:
  entrypoint: tests.entrypoints.toy:run
  config: {x: 0.5}
search_space:
  - {name: x, path: x, kind: float, low: 0.0, high: 1.0}
"""
# The built-in trainer's config has a schema, so a search path is checked against it (line 11).
DIGITS_TEXT = """\
study:
  name: bad
  storage: sqlite:///bad.db
trainer:
  config:
    epochs: 1
    model: {builder: cnn, kwargs: {width: 8}}
    data: {kind: digits, batch_size: 32}
    optim: {target: torch.optim.AdamW, optim_args: {lr: 0.001}}
search_space:
  - {name: lr, path: optim.optim_arg.lr, kind: float, low: 1.0e-4, high: 1.0e-1, log: true}
"""


@dataclass(frozen=True)
class BadCase:
    text: str
    line: int
    field: str
    says: tuple[str, ...]
    never_says: tuple[str, ...] = ()


BAD_CASES = {
    "misspelt key": BadCase(
        TOY_TEXT.replace("n_trials: 2", "n_trails: 2"),
        3,
        "study.n_trails",
        ("did you mean 'n_trials'",),
    ),
    "bad type": BadCase(
        TOY_TEXT.replace("n_trials: 2", "n_trials: two"), 3, "study.n_trials", ("'two'",)
    ),
    "reversed bounds": BadCase(
        TOY_TEXT.replace("low: 0.0, high: 1.0", "low: 1.0, high: 0.5"),
        12,
        "search_space[0]",
        ("0.5",),
    ),
    "search path not in trainer config": BadCase(
        DIGITS_TEXT, 11, "search_space[0].path", ("optim.optim_arg.lr", "did you mean 'optim_args'")
    ),
    "missing entry-point module": BadCase(
        TOY_TEXT.replace("tests.entrypoints.toy:run", "no_such_pkg.trainer:run"),
        9,
        "trainer.entrypoint",
        ("no_such_pkg",),
    ),
    "storage driver missing, password in URL": BadCase(
        TOY_TEXT.replace("sqlite:///bad.db", "postgresql+pg8000://u:secret@db.invalid/hpo"),
        4,
        "study.storage",
        ("pg8000", "pip install"),
        never_says=("secret",),
    ),
    # The built-in trainer's metrics are known from its config (issue 18, item 1).
    "objective the built-in trainer never reports": BadCase(
        DIGITS_TEXT.replace("optim_arg.lr", "optim_args.lr").replace(
            "trainer:\n", "objective: {metric: macro_f2, direction: maximize}\ntrainer:\n"
        ),
        4,
        "objective.metric",
        ("'macro_f2' is never reported by the built-in trainer", "did you mean 'macro_f1'"),
    ),
    "one of several objectives never reported": BadCase(
        DIGITS_TEXT.replace("optim_arg.lr", "optim_args.lr").replace(
            "trainer:\n",
            "objective:\n  metrics:\n  - {name: macro_f1}\n  - {name: latency_msec, "
            "direction: minimize}\ntrainer:\n",
        ),
        7,
        "objective.metrics[1].name",
        ("did you mean 'latency_ms'",),
    ),
    "constraint on a metric never reported": BadCase(
        DIGITS_TEXT.replace("optim_arg.lr", "optim_args.lr").replace(
            "trainer:\n",
            "objective:\n  metric: loss\n  constraints:\n  - {metric: nparams, max: 1.0e6}"
            "\ntrainer:\n",
        ),
        7,
        "objective.constraints[0].metric",
        ("did you mean 'n_params'",),
    ),
    "latency objective with latency off": BadCase(
        DIGITS_TEXT.replace("optim_arg.lr", "optim_args.lr")
        .replace("trainer:\n", "objective: {metric: latency_ms}\ntrainer:\n")
        .replace("    epochs: 1\n", "    epochs: 1\n    eval: {latency: {enabled: false}}\n"),
        4,
        "objective.metric",
        ("trainer.config.eval.latency.enabled: true",),
    ),
    # MLflow 3 refuses its file store when the run opens it (issue 18, item 5).
    "MLflow file store": BadCase(
        TOY_TEXT + "tracking:\n  mlflow: {tracking_uri: mlruns}\n",
        14,
        "tracking.mlflow.tracking_uri",
        ("MLflow's file store", "sqlite:///mlflow.db", "MLFLOW_ALLOW_FILE_STORE=true"),
    ),
    # Checked against the GPUs visible here; no machine shows 64.
    "GPUs that this machine does not have": BadCase(
        TOY_TEXT + "trials: {devices: 'cuda:63'}\n",
        13,
        "trials.devices",
        ("GPU index 63 is not visible",),
    ),
}


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_study_exits_2_naming_the_field_and_writes_nothing(
    cli: Callable[..., Result], tmp_path: Path, case: str, command: str
) -> None:
    bad = BAD_CASES[case]
    (tmp_path / "study.yaml").write_text(bad.text)
    before = listing(tmp_path)

    result = cli(command, "study.yaml", cwd=tmp_path)

    assert result.code == EXIT_BAD_INPUT, result
    assert result.out == ""
    message = result.err
    assert message.startswith("error: ") and message.count("\n") == 1, message
    assert "study.yaml" in message and f": {bad.field}" in message, message
    for text in bad.says:
        assert text in message
    for text in bad.never_says:
        assert text not in message
    assert listing(tmp_path) == before, "bad input must be rejected before anything is written"


@pytest.mark.parametrize(
    "case",
    BAD_CASES,
)
def test_bad_study_message_names_file_line_and_field(
    cli: Callable[..., Result], tmp_path: Path, case: str
) -> None:
    bad = BAD_CASES[case]
    (tmp_path / "study.yaml").write_text(bad.text)

    result = cli("validate", "study.yaml", cwd=tmp_path)

    assert result.code == EXIT_BAD_INPUT
    assert result.err.startswith(f"error: study.yaml:{bad.line}: {bad.field}"), result.err


@pytest.mark.processes
def test_validate_good_study_prints_one_summary_line(
    write_study: Callable[..., Path], tmp_path: Path
) -> None:
    write_study(toy_study("good", study={"n_trials": 7}))
    before = listing(tmp_path)

    result = run_cli("validate", "study.yaml", cwd=tmp_path)

    assert result.code == EXIT_OK, result.err
    lines = result.out.splitlines()
    assert len(lines) == 1, result.out
    assert "ok" in lines[0] and "'good'" in lines[0] and "7 trials" in lines[0]
    assert "maximize score" in lines[0] and "search space: x" in lines[0]
    assert "; sampler random (seed 0) · pruner none; entry point" in lines[0]
    assert listing(tmp_path) == before


def test_validate_a_command_study_names_the_command_and_checks_its_script(
    cli: Callable[..., Result], write_study: Callable[..., Path], tmp_path: Path
) -> None:
    doc = toy_study("cmd")
    doc["trainer"] = {"command": ["{python}", "train.py", "--x={x}"]}
    write_study(doc)
    result = cli("validate", "study.yaml", cwd=tmp_path)
    assert result.code == EXIT_BAD_INPUT
    assert "study.yaml:20: trainer.command[1]: no such script: 'train.py'" in result.err
    (tmp_path / "train.py").write_text("print('hi')\n")
    before = listing(tmp_path)
    result = cli("validate", "study.yaml", cwd=tmp_path)
    assert result.code == EXIT_OK, result.err
    assert "; command '{python}' train.py '--x={x}'; " in result.out
    assert listing(tmp_path) == before


def test_validate_applies_overrides(
    cli: Callable[..., Result], write_study: Callable[..., Path], tmp_path: Path
) -> None:
    write_study(toy_study("over", study={"n_trials": 7}))

    result = cli(
        "validate",
        "study.yaml",
        "--set",
        "study.n_trials=1",
        "--set",
        "objective.direction=minimize",
        cwd=tmp_path,
    )

    assert result.code == EXIT_OK, result.err
    assert "1 trial" in result.out and "7 trials" not in result.out
    assert "minimize score" in result.out


@pytest.mark.parametrize(
    ("override", "code"),
    [("trainer.config.epochs=1", EXIT_OK), ("trainer.config.epochs=abc", EXIT_BAD_INPUT)],
)
def test_trainer_config_overrides_are_checked_against_its_schema(
    cli: Callable[..., Result], tmp_path: Path, override: str, code: int
) -> None:
    shutil.copy(QUICKSTART, tmp_path / "study.yaml")
    before = listing(tmp_path)

    result = cli("validate", "study.yaml", "--set", override, cwd=tmp_path)

    assert result.code == code, result.err
    if code == EXIT_BAD_INPUT:
        assert result.err.startswith("error: <--set>: trainer.config.epochs:"), result.err
        assert "'abc'" in result.err
    assert listing(tmp_path) == before


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize(
    ("override", "names"),
    [
        ("study.n_trials", "PATH=VALUE"),  # no '='
        ("study.n_trials=0", "study.n_trials"),  # bad value
        ("study.n_trails=3", "did you mean 'n_trials'"),  # misspelt key
        ("search_space[5].low=0", "out of range"),  # no such dimension
    ],
)
def test_bad_override_exits_2_naming_set(
    cli: Callable[..., Result],
    write_study: Callable[..., Path],
    tmp_path: Path,
    command: str,
    override: str,
    names: str,
) -> None:
    write_study(toy_study("over"))
    before = listing(tmp_path)

    result = cli(command, "study.yaml", "--set", override, cwd=tmp_path)

    assert result.code == EXIT_BAD_INPUT
    assert result.err.startswith("error: <--set>"), result.err
    assert names in result.err
    assert listing(tmp_path) == before


# ---------------------------------------------------------------------------------------------
# run: trials, resume, budget, space changes


@pytest.mark.processes
def test_run_resume_extend_and_best(
    cli: Callable[..., Result], write_study: Callable[..., Path], tmp_path: Path
) -> None:
    path = write_study(curve_study("resume"))

    first = cli("run", path)
    assert first.code == EXIT_OK, first.err
    trials = first.trials()
    assert [(n, s) for n, s, _ in trials] == [(0, "COMPLETE"), (1, "COMPLETE")], first.out
    best_number, best_value = max(((n, v) for n, _, v in trials), key=lambda nv: nv[1] or 0.0)
    assert first.best() == (best_number, pytest.approx(best_value, abs=1e-4))
    assert first.out.rstrip().splitlines()[-1].startswith("best trial")

    again = cli("run", path)
    assert again.code == EXIT_OK, again.err
    assert again.trials() == [], "a finished study runs no trial when rerun"
    assert "nothing to run" in again.out
    assert again.best() == first.best()

    more = cli("run", path, "--set", "study.n_trials=3")
    assert more.code == EXIT_OK, more.err
    assert [n for n, _, _ in more.trials()] == [2]

    stored = stored_trials(path)
    assert [t.state.name for t in stored] == ["COMPLETE"] * 3
    # The trial reported its own sample: the value is the param that the runner wrote.
    assert all(t.value == pytest.approx(t.params["x"]) for t in stored)
    best_trial = max(stored, key=lambda t: t.value or 0.0)

    shown = cli("best", path)
    assert shown.code == EXIT_OK, shown.err
    assert shown.best() == (best_trial.number, pytest.approx(best_trial.value, rel=1e-5))
    assert f"x: {best_trial.params['x']}" in shown.out


@pytest.mark.processes
def test_run_applies_overrides_to_study_and_trainer_config(
    cli: Callable[..., Result], write_study: Callable[..., Path]
) -> None:
    # Without a dimension on it, curve[1] is a plain config value the override replaces.
    doc = curve_study("setrun", objective={"reduce": "last"})
    doc["trainer"]["config"]["curve"] = [0.0, 0.9]
    path = write_study(doc)

    result = cli(
        "run", path, "--set", "study.n_trials=1", "--set", "trainer.config.curve=[0.5, 0.25]"
    )

    assert result.code == EXIT_OK, result.err
    assert result.trials() == [(0, "COMPLETE", pytest.approx(0.25))]
    assert [t.value for t in stored_trials(path)] == [pytest.approx(0.25)]


@pytest.mark.processes
def test_space_change_is_refused_unless_allowed(
    cli: Callable[..., Result], write_study: Callable[..., Path]
) -> None:
    path = write_study(curve_study("space", study={"n_trials": 1}))
    assert cli("run", path).code == EXIT_OK

    changed = curve_study("space", study={"n_trials": 2})
    changed["search_space"][0]["high"] = 2.0
    changed["search_space"].append(
        {"name": "y", "path": "y", "kind": "int", "low": 1, "high": 3, "new_key": True}
    )
    write_study(changed)

    refused = cli("run", path)
    assert refused.code == EXIT_BAD_INPUT
    assert "search_space" in refused.err
    assert "x: high" in refused.err and "y: added" in refused.err, refused.err
    assert "--allow-space-change" in refused.err
    assert refused.trials() == []
    assert len(stored_trials(path)) == 1

    allowed = cli("run", path, "--allow-space-change")
    assert allowed.code == EXIT_OK, allowed.err
    assert "search space changed" in allowed.out
    assert [n for n, _, _ in allowed.trials()] == [1]
    assert set(stored_trials(path)[1].params) == {"x", "y"}


@pytest.mark.processes
def test_trial_without_the_objective_metric_fails_listing_what_it_reported(
    cli: Callable[..., Result], write_study: Callable[..., Path]
) -> None:
    doc = toy_study("nometric", study={"n_trials": 1})
    doc["trainer"]["config"] = {"metric": "accuracy", "curve": [0.5, 0.6]}
    path = write_study(doc)

    result = cli("run", path)

    # No trial of the run succeeded: exit 1 with the reason (issue 8, item 6).
    assert result.code == EXIT_FAILURE, result.err
    assert [(n, s) for n, s, _ in result.trials()] == [(0, "FAIL")], result.out
    (trial,) = stored_trials(path)
    assert trial.state.name == "FAIL"
    reason = trial.user_attrs["reason"]
    assert "objective.metric 'score'" in reason and "'accuracy'" in reason, reason
    assert reason in result.out


@pytest.mark.processes
def test_max_failures_stops_the_study_with_exit_1(
    write_study: Callable[..., Path], tmp_path: Path
) -> None:
    doc = toy_study("failing", study={"n_trials": 5, "max_failures": 2})
    doc["trainer"]["config"] = {
        "actions": [{"do": "raise", "type": "ValueError", "message": "boom 42"}]
    }
    path = write_study(doc)

    result = run_cli("run", "study.yaml", cwd=tmp_path)

    assert result.code == EXIT_FAILURE, result.out + result.err
    assert "study.max_failures=2" in result.err and "ValueError: boom 42" in result.err, result.err
    # Said once (issue 8, item 13), as the run's error.
    assert (result.out + result.err).count("reaching study.max_failures") == 1, result.out
    assert [(n, s) for n, s, _ in result.trials()] == [(0, "FAIL"), (1, "FAIL")], result.out
    assert [t.state.name for t in stored_trials(path)] == ["FAIL", "FAIL"]


@pytest.mark.processes
def test_trials_failing_alike_with_a_value_of_their_own_stop_the_run(
    write_study: Callable[..., Path], tmp_path: Path
) -> None:
    # ValueError("bad lr " + lr): the message differs per trial, the failure does not.
    doc = toy_study("alike", study={"n_trials": 6})
    doc["trainer"]["config"] = {"actions": [{"do": "raise", "type": "ValueError", "message": 0}]}
    doc["search_space"] = [
        {"name": "lr", "path": "actions[0].message", "kind": "float", "low": 0.001, "high": 0.1}
    ]
    path = write_study(doc)

    result = run_cli("run", "study.yaml", cwd=tmp_path)

    assert result.code == EXIT_FAILURE, result.out + result.err
    assert "all failed alike" in result.err, result.err
    assert [s for _, s, _ in result.trials()] == ["FAIL"] * 3, result.out
    assert len(stored_trials(path)) == 3


@pytest.mark.processes
def test_printed_follow_ups_name_the_same_study(
    cli: Callable[..., Result], write_study: Callable[..., Path], tmp_path: Path
) -> None:
    doc = toy_study("in-the-file", study={"n_trials": 10})
    doc["trainer"]["config"] = {"actions": [{"do": "raise", "message": "boom"}]}
    write_study(doc)
    overrides = ["--set", "study.name=other", "--set", "study.n_trials=2"]

    result = cli("run", "study.yaml", *overrides, cwd=tmp_path)

    assert result.code == EXIT_FAILURE, result.err
    (retry,) = [line for line in result.out.splitlines() if "--retry-failed" in line]
    argv = shlex.split(retry.split(": ", 1)[1])
    assert argv == ["dvt-hpo", "run", "study.yaml", *overrides, "--retry-failed"], retry
    (watch,) = [line for line in result.out.splitlines() if line.startswith("watch it")]
    assert shlex.split(watch.split(": ", 1)[1]) == [
        "dvt-hpo",
        "dashboard",
        "study.yaml",
        *overrides,
    ]
    # The same overrides give status the run's study and budget.
    status = cli("status", "study.yaml", *overrides, cwd=tmp_path)
    assert status.code == EXIT_OK, status.err
    assert status.out.startswith("study 'other'") and "2/2 trials finished" in status.out


# ---------------------------------------------------------------------------------------------
# best


@pytest.mark.parametrize(
    "storage",
    [
        "sqlite:///never.db",
        "journal:///never.log",
    ],
)
def test_best_before_any_run_exits_1_and_creates_nothing(
    cli: Callable[..., Result], write_study: Callable[..., Path], tmp_path: Path, storage: str
) -> None:
    write_study(toy_study("never-ran", study={"storage": storage}))
    before = listing(tmp_path)

    result = cli("best", "study.yaml", cwd=tmp_path)

    assert result.code == EXIT_FAILURE
    assert "no study database yet" in result.err and "dvt-hpo run" in result.err, result.err
    assert listing(tmp_path) == before


# ---------------------------------------------------------------------------------------------
# Python API and the built-in trainer (the two digits runs of this file)

RUN_STUDIES = textwrap.dedent(
    """\
    import json, sys
    import dvt_hpo

    lines = []
    toy = dvt_hpo.run_study(sys.argv[1], out=lines.append)
    digits = dvt_hpo.run_study(sys.argv[2], sys.argv[3:], out=lines.append)
    print(json.dumps({
        "toy": [[t.number, t.state.name, t.value] for t in toy.trials],
        "digits": [[t.number, t.state.name, t.value] for t in digits.trials],
        "study_type": type(digits).__module__ + "." + type(digits).__name__,
        "lines": lines,
        "torch_modules": sorted(m for m in sys.modules if m.split(".")[0] == "torch"),
    }))
    assert "torch" not in sys.modules, "the orchestrator imported torch"
    """
)


@dataclass
class RanStudies:
    proc: subprocess.CompletedProcess[str]
    report: dict[str, Any]
    digits_file: Path


@pytest.fixture(scope="module")
def ran_studies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RanStudies]:
    """A toy study and a 2-trial digits study run through ``dvt_hpo.run_study`` in one fresh
    interpreter, which reports whether torch got into it."""
    toy_dir = tmp_path_factory.mktemp("toy")
    toy_file = toy_dir / "study.yaml"
    toy_file.write_text(yaml.safe_dump(toy_study("api-toy"), sort_keys=False))
    digits_dir = tmp_path_factory.mktemp("digits")
    digits_file = digits_dir / "quickstart.yaml"
    shutil.copy(QUICKSTART, digits_file)
    proc = subprocess.run(
        [sys.executable, "-c", RUN_STUDIES, str(toy_file), str(digits_file), *DIGITS_FAST],
        cwd=toy_dir,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
    )
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "{}"
    yield RanStudies(proc, json.loads(last) if last.startswith("{") else {}, digits_file)


@pytest.mark.processes
def test_run_study_returns_the_study_and_never_imports_torch(ran_studies: RanStudies) -> None:
    proc, report = ran_studies.proc, ran_studies.report
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["torch_modules"] == []
    assert report["study_type"] == "optuna.study.study.Study"
    assert [(n, s) for n, s, _ in report["toy"]] == [(0, "COMPLETE"), (1, "COMPLETE")]
    assert [(n, s) for n, s, _ in report["digits"]] == [(0, "COMPLETE"), (1, "COMPLETE")]
    assert all(0.0 <= value <= 1.0 for _, _, value in report["digits"])  # macro-F1
    assert sum(line.startswith("best trial") for line in report["lines"]) == 2


def test_run_study_rejects_a_missing_entry_point_before_writing(
    write_study: Callable[..., Path], tmp_path: Path
) -> None:
    doc = toy_study("nomodule", study={"n_trials": 1})
    doc["trainer"]["entrypoint"] = "no_such_pkg.trainer:run"
    path = write_study(doc)
    before = listing(tmp_path)

    with pytest.raises(SpecError, match="no_such_pkg") as raised:
        run_study(path, out=lambda line: None)

    assert raised.value.field == "trainer.entrypoint"
    assert listing(tmp_path) == before


@pytest.mark.processes
def test_best_export_then_train_round_trip(
    ran_studies: RanStudies, cli: Callable[..., Result], tmp_path: Path
) -> None:
    assert ran_studies.proc.returncode == 0, ran_studies.proc.stderr
    study_file = ran_studies.digits_file
    exported = tmp_path / "best.yaml"

    shown = cli(
        "best", study_file, *(a for o in DIGITS_FAST for a in ("--set", o)), "--export", exported
    )

    assert shown.code == EXIT_OK, shown.err
    spec = load_spec(study_file, DIGITS_FAST)
    best = optuna.load_study(study_name=spec.study.name, storage=spec.study.storage).best_trial
    assert shown.best() == (best.number, pytest.approx(best.value, rel=1e-5))
    assert f"wrote {exported}" in shown.out
    config = yaml.safe_load(exported.read_text())
    assert {d.name: get_path(config, d.path) for d in spec.search_space} == best.params
    assert config["checkpoint"]["enable_checkpointing"] is True
    assert config["epochs"] == 1

    output_dir = tmp_path / "train-out"
    trained = run_cli(
        "train", exported, "--set", "epochs=1", "--set", f"output_dir={output_dir}", cwd=tmp_path
    )

    assert trained.code == EXIT_OK, trained.err
    assert re.search(r"^epoch 0: .*macro_f1=", trained.out, re.MULTILINE), trained.out
    assert (output_dir / "checkpoints" / "last.pt").is_file()


@pytest.mark.processes
def test_best_export_reruns_to_the_trial_value(cli: Callable[..., Result], tmp_path: Path) -> None:
    # Two trials at a time: each gets 1 CPU thread of this machine's cores; `train` would take
    # them all, and a thread count changes the float sums (issue 18, item 7).
    study_file = tmp_path / "quickstart.yaml"
    shutil.copy(QUICKSTART, study_file)
    overrides = ("study.n_trials=1", "trainer.config.epochs=2", "trials.parallel=2")
    sets = [a for o in overrides for a in ("--set", o)]
    ran = run_cli("run", study_file, *sets, cwd=tmp_path)
    assert ran.code == EXIT_OK, ran.out + ran.err
    trial = stored_trials(study_file, *overrides)[0]
    exported = tmp_path / "best.yaml"
    assert cli("best", study_file, *sets, "--export", exported).code == EXIT_OK
    config = yaml.safe_load(exported.read_text())
    assert config["devices"]["threads"] == trial.user_attrs["threads"] == 1
    assert (config["checkpoint"]["monitor"], config["checkpoint"]["mode"]) == ("macro_f1", "max")

    out = tmp_path / "train-out"
    trained = run_cli("train", exported, "--set", f"output_dir={out}", cwd=tmp_path)

    assert trained.code == EXIT_OK, trained.err
    (summary,) = [line for line in trained.out.splitlines() if line.startswith("done:")]
    step = max(trial.intermediate_values, key=lambda s: (trial.intermediate_values[s], -s))
    assert summary == (
        f"done: best epoch {step} of 2, macro_f1={trial.value:.6f} (checkpoint.monitor, max); "
        f"checkpoint {out / 'checkpoints' / 'best.pt'}"
    ), trained.out
    # The very numbers: the validation loss of that epoch, to the last bit.
    import torch

    saved = torch.load(out / "checkpoints" / "best.pt", weights_only=False)["metrics"]
    assert [saved["loss"]] == [v for s, v in trial.user_attrs["history"]["loss"] if s == step]


@pytest.mark.processes
def test_train_reads_yaml_numbers_as_the_study_file_does(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    # `weight_decay: 1e-4` was read as the string '1e-4' and refused.
    config = tmp_path / "t.yaml"
    config.write_text(
        "epochs: 1\noutput_dir: out\ndata: {max_samples: 120, batch_size: 32}\n"
        "model: {builder: mlp, kwargs: {width: 8}}\n"
        "optim:\n  weight_decay: 1e-4\n  optim_args: {lr: 1e-2}\n"
        "checkpoint: {enable_checkpointing: false}\ndevices: {device: cpu}\n"
    )

    result = cli("train", "t.yaml", "--set", "optim.weight_decay=2e-4", cwd=tmp_path)

    assert result.code == EXIT_OK, result.err
    assert re.search(r"^epoch 0: .*macro_f1=", result.out, re.MULTILINE), result.out

    bad = cli("train", "t.yaml", "--set", "optim.weight_decay=lots", cwd=tmp_path)

    assert bad.code == EXIT_BAD_INPUT
    assert bad.err.startswith("error: <--set>: optim.weight_decay: expected float"), bad.err


# ---------------------------------------------------------------------------------------------
# validate: where the entry point's module comes from (one rule with the trials)


def _rule_study(folder: Path, module: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    doc = toy_study("rule", trainer={"entrypoint": f"{module}:run", "config": {"x": 0.5}})
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.processes
def test_validate_uses_the_study_folder_module_not_the_working_directory(tmp_path: Path) -> None:
    study = _rule_study(tmp_path / "study", "rule_trainer")
    workdir = tmp_path / "work"
    workdir.mkdir()
    for folder in (study.parent, workdir):
        (folder / "rule_trainer.py").write_text("def run(config, ctx):\n    return {}\n")
    before = listing(tmp_path)

    result = run_cli("validate", study, cwd=workdir)

    assert result.code == EXIT_OK, result.err
    assert f"from {study.parent.resolve() / 'rule_trainer.py'}" in result.out, result.out
    assert str(workdir / "rule_trainer.py") not in result.out
    assert listing(tmp_path) == before


@pytest.mark.processes
def test_validate_never_finds_a_module_only_in_the_working_directory(tmp_path: Path) -> None:
    study = _rule_study(tmp_path / "study", "cwd_only_trainer")
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "cwd_only_trainer.py").write_text("def run(config, ctx):\n    return {}\n")

    result = run_cli("validate", study, cwd=workdir)

    assert result.code == EXIT_BAD_INPUT, result
    message = result.err
    assert message.startswith(f"error: {study}:") and message.count("\n") == 1, message
    assert ": trainer.entrypoint: module 'cwd_only_trainer'" in message, message
    assert "cannot be found" in message and "never from the working directory" in message


# ---------------------------------------------------------------------------------------------
# validate against the stored study (read-only)


def mtimes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def stored_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-trial toy study stored by a real ``dvt-hpo run`` process: an in-process run leaves
    its connections to threads and the garbage collector, whose late WAL checkpoint would change
    the files under a test of "nothing written"."""
    folder = tmp_path_factory.mktemp("stored")
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(curve_study("stored", study={"n_trials": 1}), sort_keys=False))
    ran = run_cli("run", path, cwd=folder)
    assert ran.code == EXIT_OK, ran.err
    return path


@pytest.mark.processes
def test_validate_refuses_another_metric_than_the_stored_study(
    cli: Callable[..., Result], stored_study: Path
) -> None:
    before = mtimes(stored_study.parent)

    changed = cli("validate", stored_study, "--set", "objective.metric=accuracy")

    assert changed.code == EXIT_BAD_INPUT, changed
    message = changed.err
    assert message.startswith("error: <--set>: objective.metric: "), message
    assert message.count("\n") == 1, message
    assert "'score' -> 'accuracy'" in message and "another study.name" in message, message
    assert mtimes(stored_study.parent) == before, "validate must not write"

    same = cli("validate", stored_study)
    assert same.code == EXIT_OK, same.err
    assert "stored study: 1 trial, same objective and search space" in same.out, same.out
    assert mtimes(stored_study.parent) == before


@pytest.mark.processes
def test_validate_refuses_a_space_change_unless_allowed(
    cli: Callable[..., Result], stored_study: Path
) -> None:
    before = mtimes(stored_study.parent)

    refused = cli("validate", stored_study, "--set", "search_space[0].high=2.0")
    allowed = cli(
        "validate", stored_study, "--set", "search_space[0].high=2.0", "--allow-space-change"
    )

    assert refused.code == EXIT_BAD_INPUT, refused
    assert ": search_space: " in refused.err and "x: high 1.0 -> 2.0" in refused.err
    assert "--allow-space-change" in refused.err
    assert allowed.code == EXIT_OK, allowed.err
    assert "search space changed: x: high 1.0 -> 2.0" in allowed.out, allowed.out
    assert mtimes(stored_study.parent) == before


@pytest.mark.processes
def test_run_refuses_another_metric_or_reduce_and_writes_nothing(
    cli: Callable[..., Result], stored_study: Path
) -> None:
    """Changing the objective of a stored study was only a note: values of two metrics were
    then ranked as one."""
    before = mtimes(stored_study.parent)

    changed = cli(
        "run",
        stored_study,
        "--set",
        "study.n_trials=2",
        "--set",
        "objective.metric=accuracy",
        "--set",
        "objective.reduce=last",
    )

    assert changed.code == EXIT_BAD_INPUT, changed
    assert "'score' -> 'accuracy'" in changed.err and "'best' -> 'last'" in changed.err
    assert changed.err.count("\n") == 1 and changed.trials() == [], changed
    assert mtimes(stored_study.parent) == before
    assert len(stored_trials(stored_study)) == 1


def test_validate_of_a_new_study_creates_no_database(
    cli: Callable[..., Result], write_study: Callable[..., Path], tmp_path: Path
) -> None:
    write_study(curve_study("fresh"))
    before = listing(tmp_path)
    result = cli("validate", "study.yaml", cwd=tmp_path)
    assert result.code == EXIT_OK, result.err
    assert "no stored study yet" in result.out, result.out
    assert listing(tmp_path) == before


def test_validate_with_an_unreachable_server_is_one_line(
    cli: Callable[..., Result], write_study: Callable[..., Path], tmp_path: Path
) -> None:
    write_study(curve_study("far", study={"storage": "postgresql://u:secret@127.0.0.1:1/db"}))
    result = cli("validate", "study.yaml", cwd=tmp_path)
    assert result.code == EXIT_FAILURE, result
    assert result.err.startswith("error: ") and result.err.count("\n") == 1, result.err
    assert "secret" not in result.err and "127.0.0.1:1" in result.err


# ---------------------------------------------------------------------------------------------
# validate checks the entry-point function (read, never run)


@pytest.mark.parametrize(
    ("entry", "code", "says"),
    [
        ("mytrainer:run", EXIT_OK, "entry point mytrainer:run from"),
        ("mytrainer:runn", EXIT_BAD_INPUT, "did you mean 'run'"),
        ("mytrainer.py:run", EXIT_BAD_INPUT, "write 'mytrainer:run'"),
        ("math:sqrt", EXIT_OK, "note: module 'math' has no Python source"),
    ],
)
def test_validate_reads_the_entry_point_function_without_running_it(
    cli: Callable[..., Result],
    write_study: Callable[..., Path],
    tmp_path: Path,
    entry: str,
    code: int,
    says: str,
) -> None:
    doc = toy_study("entry", trainer={"entrypoint": entry, "config": {"x": 0.5}})
    write_study(doc)
    (tmp_path / "mytrainer.py").write_text(
        'raise SystemExit("imported")\n\ndef run(config, ctx):\n    return {}\n'
    )
    before = listing(tmp_path)

    result = cli("validate", "study.yaml", cwd=tmp_path)

    assert result.code == code, result
    assert says in (result.out if code == EXIT_OK else result.err), result
    if code == EXIT_BAD_INPUT:
        assert (
            result.err.startswith("error: study.yaml:") and ": trainer.entrypoint: " in result.err
        )
    assert listing(tmp_path) == before


# ---------------------------------------------------------------------------------------------
# --version, best --export to a bad path, train on unreadable data: one line each


def test_version_line(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"dvt-hpo {version('dvt-hpo')} (optuna {version('optuna')}, Python ")
    assert out.count("\n") == 1


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("no/such/dir/best.yaml", "folder 'no/such/dir' does not exist"),
        ("study.yaml/best.yaml", "'study.yaml' is not a folder"),
        ("adir", "is a folder"),
    ],
)
def test_best_export_to_a_bad_path_is_one_line_and_writes_nothing(
    cli: Callable[..., Result],
    write_study: Callable[..., Path],
    tmp_path: Path,
    target: str,
    says: str,
) -> None:
    write_study(curve_study("export", study={"n_trials": 1}))
    (tmp_path / "adir").mkdir()
    before = mtimes(tmp_path)

    result = cli("best", "study.yaml", "--export", target, cwd=tmp_path)

    assert result.code == EXIT_BAD_INPUT, result
    assert result.err.startswith(f"error: --export {target}: "), result.err
    assert says in result.err and result.err.count("\n") == 1, result.err
    assert result.out == ""
    assert mtimes(tmp_path) == before


@pytest.mark.processes
def test_best_export_writes_one_file_atomically(
    cli: Callable[..., Result], write_study: Callable[..., Path], tmp_path: Path
) -> None:
    write_study(curve_study("export", study={"n_trials": 1}))
    assert cli("run", "study.yaml", cwd=tmp_path).code == EXIT_OK
    (tmp_path / "adir").mkdir()

    good = cli("best", "study.yaml", "--export", "adir/best.yaml", cwd=tmp_path)

    assert good.code == EXIT_OK, good.err
    assert yaml.safe_load((tmp_path / "adir" / "best.yaml").read_text())["config"]["curve"]
    assert sorted(p.name for p in (tmp_path / "adir").iterdir()) == ["best.yaml"]


@pytest.mark.parametrize(
    ("damage", "workers"),
    [
        pytest.param("garbage", 0, id="unreadable-at-load"),
        pytest.param("truncated", 0, id="truncated-at-decode"),
        pytest.param("truncated", 1, id="truncated-in-a-dataloader-worker", marks=PROCESSES),
    ],
)
@pytest.mark.processes
def test_train_on_a_corrupt_image_names_the_file_without_a_traceback(
    cli: Callable[..., Result], tmp_path: Path, damage: str, workers: int
) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for name in ("red", "blue"):
        (tmp_path / "images" / name).mkdir(parents=True)
        for i in range(4):
            pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "images" / name / f"{i}.png")
    corrupt = tmp_path / "images" / "blue" / "3.png"
    good = corrupt.read_bytes()
    corrupt.write_bytes(b"\x89PNG garbage" if damage == "garbage" else good[: len(good) // 2])
    (tmp_path / "t.yaml").write_text(
        "epochs: 1\noutput_dir: out\n"
        f"data: {{kind: imagefolder, root: images, batch_size: 2, num_workers: {workers}}}\n"
        "model: {builder: mlp, kwargs: {width: 4}}\ndevices: {device: cpu}\n"
        "checkpoint: {enable_checkpointing: false}\n"
    )

    result = cli("train", "t.yaml", cwd=tmp_path)

    assert result.code == EXIT_BAD_INPUT, result
    assert result.err.startswith("error: data.root: "), result.err
    assert result.err.count("\n") == 1 and "Traceback" not in result.err, result.err
    assert "blue/3.png" in result.err, result.err


# issue 8: export what ran, one-line runtime failures, unusable runs_dir


@pytest.mark.processes
def test_best_exports_the_config_the_trial_ran_with(
    cli: Callable[..., Result], write_study: Callable[..., Path], tmp_path: Path
) -> None:
    doc = curve_study("as-ran", study={"n_trials": 1})
    doc["trainer"]["config"].update(
        epochs=2,
        output_dir="out",
        data={"root": "data/train", "val_root": None},
        checkpoint={"enable_checkpointing": False, "dir": "ckpt"},
    )
    path = write_study(doc)
    ran = cli("run", path, "--set", "trainer.config.epochs=3")
    assert ran.code == EXIT_OK, ran.err
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # Exported from another folder, without the --set: the trial ran with epochs 3.
    exported = cli("best", path, "--export", "best.yaml", cwd=elsewhere)
    assert exported.code == EXIT_OK, exported.err
    export = yaml.safe_load((elsewhere / "best.yaml").read_text())
    # Not the built-in trainer: the export names its entry point and folder beside the config.
    assert export["entrypoint"] == "tests.entrypoints.toy:run" and export["cwd"] == str(tmp_path)
    config = export["config"]
    (trial,) = stored_trials(path)
    assert config["epochs"] == 3
    assert config["curve"] == [trial.params["x"]]
    assert config["checkpoint"] == {"enable_checkpointing": True, "dir": str(tmp_path / "ckpt")}
    assert config["output_dir"] == str(tmp_path / "out")
    assert config["data"] == {"root": str(tmp_path / "data" / "train"), "val_root": None}
    assert "note:" not in exported.out


def test_best_export_into_a_missing_folder_exits_2_and_writes_nothing(
    cli: Callable[..., Result], write_study: Callable[..., Path], tmp_path: Path
) -> None:
    path = write_study(curve_study("nofolder", study={"n_trials": 1}))
    study = optuna.create_study(
        study_name="nofolder", storage=load_spec(path).study.storage, direction="maximize"
    )
    study.add_trial(
        optuna.trial.create_trial(
            params={"x": 0.5},
            distributions={"x": optuna.distributions.FloatDistribution(0, 1)},
            value=0.5,
        )
    )
    before = listing(tmp_path)
    result = cli("best", path, "--export", "no/such/dir/best.yaml", cwd=tmp_path)
    assert result.code == EXIT_BAD_INPUT, result.err
    assert result.err.count("\n") == 1 and "--export" in result.err and "no/such/dir" in result.err
    assert listing(tmp_path) == before


@pytest.mark.processes
def test_an_unreachable_database_is_one_line_exit_1_password_redacted(
    write_study: Callable[..., Path], tmp_path: Path
) -> None:
    url = "postgresql://ann:s3cret@127.0.0.1:1/hpo"
    write_study(curve_study("nodb", study={"storage": url}))
    result = run_cli("run", "study.yaml", cwd=tmp_path)
    assert result.code == EXIT_FAILURE, result.out + result.err
    assert result.err.count("\n") == 1 and "Traceback" not in result.err, result.err
    assert "study.storage" in result.err and "ann:***@127.0.0.1:1" in result.err
    assert "s3cret" not in result.out + result.err


@pytest.mark.processes
def test_a_runs_dir_that_is_a_file_exits_2_at_once(
    write_study: Callable[..., Path], tmp_path: Path
) -> None:
    (tmp_path / "blocked").write_text("")
    write_study(curve_study("blocked", trials={"runs_dir": "blocked/runs"}))
    before = listing(tmp_path)
    result = run_cli("run", "study.yaml", cwd=tmp_path)
    assert result.code == EXIT_BAD_INPUT, result.out + result.err
    assert "trials.runs_dir" in result.err and "study.yaml:" in result.err, result.err
    assert listing(tmp_path) == before  # no database, no folder
