"""dvt_hpo.command.export: a command trainer's trial as an export (its argv filled in, its
folder, its threads, the config files it names), what the export reader accepts and refuses,
and ``dvt-hpo train`` of an export. The whole round trip through ``best --export`` and
``train`` on the example study: tests/command/test_script.py."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from dvt_hpo.command.export import (
    CommandExport,
    command_export,
    read_command_export,
    run_command_export,
)
from dvt_hpo.exceptions import DvtHpoError, SpecError
from dvt_hpo.spec.model import StudySpec
from dvt_hpo.studyfile import load_spec
from tests.conftest import toy_study

LR = {"name": "lr", "path": "optim.lr", "kind": "float", "low": 1e-4, "high": 0.1, "log": True}
CONFIG = {"model": {"width": 8}, "optim": {"lr": 0.0123}}


def command_spec(write_study: Callable[..., Path], *command: str) -> StudySpec:
    doc = toy_study(
        "cmd",
        trainer={
            "command": list(command),
            # The study's own values: the export shows the trial's (CONFIG).
            "config": {"model": {"width": 8}, "optim": {"lr": 0.01}},
        },
        search_space=[LR],
    )
    del doc["trainer"]["entrypoint"]
    return load_spec(write_study(doc))


def trial(number: int = 3, **user_attrs: Any) -> SimpleNamespace:
    """What the export reads of a stored trial."""
    return SimpleNamespace(number=number, user_attrs=user_attrs)


def test_the_export_is_the_trials_argv_folder_and_threads(
    write_study: Callable[..., Path], tmp_path: Path
) -> None:
    spec = command_spec(
        write_study,
        "{python}",
        "train.py",
        "--lr={lr}",
        "--width",
        "{model.width}",
        "{trial_number}",
    )
    export = tmp_path / "out" / "best.yaml"
    export.parent.mkdir()
    data = command_export(spec, trial(3, threads=2), CONFIG, export)
    assert data == {
        "study": "cmd",
        "trial": 3,
        # A dimension by its name, a config field by its path, floats exact.
        "command": [sys.executable, "train.py", "--lr=0.0123", "--width", "8", "3"],
        "cwd": str(spec.path.parent),
        "env": {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"},
    }
    # No config placeholder: no files beside the export.
    assert sorted(p.name for p in export.parent.iterdir()) == []


@pytest.mark.parametrize("threads", [None, True, "2"])
def test_threads_not_recorded_as_a_count_set_no_environment(
    write_study: Callable[..., Path], tmp_path: Path, threads: object
) -> None:
    spec = command_spec(write_study, "train.py")
    attrs = {} if threads is None else {"threads": threads}
    assert command_export(spec, trial(**attrs), CONFIG, tmp_path / "best.yaml")["env"] == {}


def test_the_config_placeholders_point_to_files_beside_the_export(
    write_study: Callable[..., Path], tmp_path: Path
) -> None:
    spec = command_spec(write_study, "train.py", "{config}", "{config_json}", "--out={trial_dir}")
    export = tmp_path / "out" / "best.yaml"
    export.parent.mkdir()
    command = command_export(spec, trial(), CONFIG, export)["command"]
    files = export.parent / "best-files"
    assert command == [
        "train.py",
        str(files / "config.yaml"),
        str(files / "config.json"),
        f"--out={files}",
    ]
    assert yaml.safe_load((files / "config.yaml").read_text()) == CONFIG
    assert json.loads((files / "config.json").read_text()) == CONFIG


def test_an_export_reads_back_as_written(write_study: Callable[..., Path], tmp_path: Path) -> None:
    spec = command_spec(write_study, "{python}", "train.py", "--lr={lr}")
    export = tmp_path / "best.yaml"
    export.write_text(yaml.safe_dump(command_export(spec, trial(5, threads=1), CONFIG, export)))
    assert read_command_export(export) == CommandExport(
        command=[sys.executable, "train.py", "--lr=0.0123"],
        cwd=str(spec.path.parent),
        env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
        study="cmd",
        trial=5,
    )


def test_a_relative_folder_is_the_exports_and_the_labels_are_optional(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    export = tmp_path / "best.yaml"
    export.write_text("command: [a]\ncwd: work\nstudy: 3\ntrial: first\n")
    assert read_command_export(export) == CommandExport(["a"], str(tmp_path / "work"), {})
    export.write_text("command: [a]\n")  # cwd: the export's folder
    assert read_command_export(export) == CommandExport(["a"], str(tmp_path), {})


@pytest.mark.parametrize(
    "text",
    [
        None,  # no file
        "command: [a\n",  # not YAML: the trainer config reader says so
        "- command\n",
        "epochs: 3\nmodel: {builder: cnn}\n",  # a trainer config
    ],
)
def test_what_is_no_command_export_is_left_to_the_trainer_config_reader(
    tmp_path: Path, text: str | None
) -> None:
    path = tmp_path / "best.yaml"
    if text is not None:
        path.write_text(text)
    assert read_command_export(path) is None


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        (
            "command: [a]\ncmd: [b]\n",
            None,
            "unknown key 'cmd' in a command export (keys: study, trial, command, cwd, env)",
        ),
        ("command: []\n", "command", "must be a non-empty list of strings, got [] (list)"),
        ("command: python x.py\n", "command", "got 'python x.py' (str)"),
        ("command: [python, 3]\n", "command", "got ['python', 3] (list)"),
        ("command: [a]\ncwd: 7\n", "cwd", "must be a folder, got 7 (int)"),
        ("command: [a]\ncwd: nowhere\n", "cwd", "no such folder: 'nowhere'"),
        ("command: [a]\nenv: {N: 1}\n", "env", "must map names to strings, got {'N': 1} (dict)"),
        ("command: [a]\nenv: [N]\n", "env", "must map names to strings, got ['N'] (list)"),
    ],
)
def test_a_broken_export_is_refused_naming_its_field(
    tmp_path: Path, text: str, field: str | None, message: str
) -> None:
    path = tmp_path / "best.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        read_command_export(path)
    assert (info.value.file, info.value.field) == (str(path), field)
    assert message in info.value.message


def test_by_hand_is_a_shell_line_with_everything_quoted() -> None:
    export = CommandExport(["python", "t.py", "--name", "a b"], "/my runs", {"X": "1 2"})
    assert export.by_hand() == "cd '/my runs' && X='1 2' python t.py --name 'a b'"
    assert CommandExport(["true"], "/r", {}).by_hand() == "cd /r && true"


PROCESSES = pytest.mark.processes


@PROCESSES
def test_the_export_runs_in_its_folder_with_its_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The suite's own OMP_NUM_THREADS=1 (tests/conftest.py) is overridden by the export's.
    script = "import os; open('seen', 'w').write(os.environ['OMP_NUM_THREADS'])"
    export = CommandExport(
        [sys.executable, "-c", script], str(tmp_path), {"OMP_NUM_THREADS": "3"}, trial=4
    )
    run_command_export(export)
    assert (tmp_path / "seen").read_text() == "3"
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"running trial 4's command: {export.by_hand()}",
        "done: trial 4's command exited 0",
    ]


@PROCESSES
def test_a_failing_command_is_one_line_with_its_exit(tmp_path: Path) -> None:
    failing = CommandExport([sys.executable, "-c", "raise SystemExit(3)"], str(tmp_path), {})
    with pytest.raises(DvtHpoError, match=r"^the command ended with exit code 3$"):
        run_command_export(failing)
    missing = CommandExport([str(tmp_path / "no-such-program")], str(tmp_path), {}, trial=1)
    with pytest.raises(DvtHpoError, match=r"^cannot run '.*no-such-program': No such file"):
        run_command_export(missing)
