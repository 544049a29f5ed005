"""``trainer.command`` and ``trainer.metrics_pattern``: what the loader accepts, what it refuses
(file, line, field, did-you-mean), and the runnable checks of the executable."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from dvt_hpo.command.script import CONFIG_JSON, CONFIG_YAML
from dvt_hpo.exceptions import SpecError
from dvt_hpo.run.preflight import load_runnable
from dvt_hpo.studyfile import COMMAND_ENTRYPOINT, StudySpec, load_spec
from tests.studyfile.helpers import bad_file_test, case

CMD = """\
study:
  name: s
trainer:
  command: ["{python}", train.py, "--lr={lr}", --epochs, "{epochs}"]
  config: {epochs: 1, optim: {momentum: 0.9}}
search_space:
  - {name: lr, path: lr, kind: float, low: 1.0e-4, high: 0.1, log: true, new_key: true}
"""
COMMAND_LINE = 4
PATTERN = "  metrics_pattern: 'epoch (?P<step>\\d+) f1=(?P<macro_f1>[0-9.]+)'\n"


def with_command(*args: str) -> str:
    return CMD.replace('"{python}", train.py, "--lr={lr}", --epochs, "{epochs}"', ", ".join(args))


def with_trainer_line(line: str) -> str:
    """CMD with one more line in section trainer, after the command (line 5)."""
    return CMD.replace("  config:", line + "  config:")


def test_a_command_study_loads_with_the_command_entry_point(write: Callable[..., Path]) -> None:
    spec = load_spec(write(with_trainer_line(PATTERN)))
    assert spec.trainer.entrypoint == COMMAND_ENTRYPOINT
    assert spec.trainer.command == ("{python}", "train.py", "--lr={lr}", "--epochs", "{epochs}")
    assert spec.trainer.metrics_pattern == r"epoch (?P<step>\d+) f1=(?P<macro_f1>[0-9.]+)"


def resolved(spec: StudySpec, params: dict[str, Any], trial_dir: Path, number: int) -> list[str]:
    """The command line trial ``number`` with ``params`` runs: the study's command rendered by
    the trial process's own lookup, on the config the dimensions wrote."""
    from dvt_hpo.command.script import _lookup
    from dvt_hpo.command.template import render
    from dvt_hpo.sampling.space import apply

    config = apply(spec.trainer.config, spec.search_space, params)
    names = {dim.name: dim.path for dim in spec.search_space}
    ctx = SimpleNamespace(trial_number=number)
    return render(spec.trainer.command or (), _lookup(config, ctx, names, trial_dir))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # braces, a config field
        (('"{{literal}}"', '"--x={optim.momentum}"'), ["{literal}", "--x=0.9"]),
        # reserved names
        (
            ('"{trial_dir}/{trial_number}"', '"{config}"', '"{config_json}"'),
            ["{dir}/7", f"{{dir}}/{CONFIG_YAML}", f"{{dir}}/{CONFIG_JSON}"],
        ),
        # lr is not in trainer.config: the dimension writes it (floats exact, with repr)
        (('"{lr}"', '"{lr}"'), ["0.0123", "0.0123"]),
    ],
)
def test_placeholders_that_resolve(
    write: Callable[..., Path], tmp_path: Path, args: tuple[str, ...], expected: list[str]
) -> None:
    spec = load_spec(write(with_command('"{python}"', *args)))
    assert spec.trainer.command == ("{python}", *(yaml.safe_load(a) for a in args))
    trial_dir = tmp_path / "runs" / "trial-0007"
    argv = resolved(spec, {"lr": 0.0123}, trial_dir, 7)
    assert argv == [sys.executable, *(e.replace("{dir}", str(trial_dir)) for e in expected)]


def test_a_command_needs_no_config(write: Callable[..., Path]) -> None:
    spec = load_spec(write(CMD.replace("  config: {epochs: 1, optim: {momentum: 0.9}}\n", "")
                           .replace('--epochs, "{epochs}"', "--x")))  # fmt: skip
    assert spec.trainer.config == {}


CONDITIONAL = CMD + (
    "  - {name: opt, path: opt, kind: categorical, choices: [sgd, adam], new_key: true}\n"
    "  - {name: beta, path: beta, kind: float, low: 0.8, high: 0.99, when: {opt: adam}}\n"
)

BAD = [
    case(
        "unknown-placeholder",
        with_command('"{python}"', '"--lr={lrr}"'),
        COMMAND_LINE,
        "trainer.command[1]",
        "placeholder {lrr}: 'lrr' is not a search dimension, a trainer.config field or a "
        "reserved name; did you mean 'lr'?",
        "(reserved: {config}, {config_json}, {trial_dir}, {trial_number}, {python}, {resume_dir})",
    ),
    case(
        # Dimension lr, named by no placeholder, would add a key: the typo is what to fix, not
        # a new_key flag.
        "placeholder-typo-before-unread-dimension",
        with_command('"{python}"', '"--lr={lrr}"').replace(
            "path: lr, kind: float, low: 1.0e-4, high: 0.1, log: true, new_key: true",
            "kind: float, low: 1.0e-4, high: 0.1, log: true",
        ),
        COMMAND_LINE,
        "trainer.command[1]",
        "placeholder {lrr}: 'lrr' is not a search dimension, a trainer.config field or a "
        "reserved name; did you mean 'lr'?",
    ),
    case(
        "config-field-typo",
        with_command('"{python}"', '"{optim.momentun}"'),
        COMMAND_LINE,
        "trainer.command[1]",
        "placeholder {optim.momentun}: not in trainer.config",
        "did you mean 'momentum'?",
    ),
    case(
        "conditional-dimension-without-default",
        CONDITIONAL.replace('"{epochs}"', '"{beta}"'),
        COMMAND_LINE,
        "trainer.command[4]",
        "dimension 'beta' is sampled only when its `when:` holds",
        "give it a default there",
    ),
    case(
        "format-spec",
        with_command('"{python}"', '"--lr={lr:.3f}"'),
        COMMAND_LINE,
        "trainer.command[1]",
        "{lr:.3f} has a format spec or conversion; write {lr}",
    ),
    case(
        "unbalanced-brace",
        with_command('"{python}"', '"--lr={lr"'),
        COMMAND_LINE,
        "trainer.command[1]",
        "write {{ and }} for literal braces",
    ),
    case(
        "not-a-list",
        CMD.replace(
            '["{python}", train.py, "--lr={lr}", --epochs, "{epochs}"]', '"python train.py"'
        ),
        COMMAND_LINE,
        "trainer.command",
        "must be a non-empty list of strings",
    ),
    case(
        "a-number",
        with_command('"{python}"', "train.py", "--epochs", "3"),
        COMMAND_LINE,
        "trainer.command[3]",
        "must be a string (quote numbers",
    ),
    case(
        "entrypoint-and-command",
        with_trainer_line("  entrypoint: mylib:run\n"),
        COMMAND_LINE,
        "trainer.command",
        "give trainer.entrypoint (a Python function run(config, ctx)) or trainer.command",
    ),
    case(
        "command-entrypoint-without-command",
        CMD.replace(
            '  command: ["{python}", train.py, "--lr={lr}", --epochs, "{epochs}"]\n',
            "  entrypoint: dvt_hpo.command:run\n",
        ),
        COMMAND_LINE,
        "trainer.entrypoint",
        "dvt_hpo.command:run runs a trainer.command: give the command instead",
    ),
    case(
        "bad-regex",
        with_trainer_line("  metrics_pattern: 'epoch (?P<step>\\d+'\n"),
        5,
        "trainer.metrics_pattern",
        "is not a valid regular expression: missing ), unterminated subpattern",
    ),
    case(
        "regex-without-step",
        with_trainer_line("  metrics_pattern: 'f1=(?P<f1>[0-9.]+)'\n"),
        5,
        "trainer.metrics_pattern",
        "needs a named group 'step'",
        "it has ['f1']",
    ),
    case(
        "regex-without-metric",
        with_trainer_line("  metrics_pattern: 'epoch (?P<step>\\d+)'\n"),
        5,
        "trainer.metrics_pattern",
        "needs a named group per metric besides 'step'",
    ),
    case(
        "pattern-without-command",
        CMD.replace(
            '  command: ["{python}", train.py, "--lr={lr}", --epochs, "{epochs}"]\n',
            "  entrypoint: mylib:run\n" + PATTERN,
        ),
        5,
        "trainer.metrics_pattern",
        "applies to trainer.command",
    ),
    case(
        "batch-size-search",
        CMD + "batch_size: {auto: true, path: batch}\n",
        8,
        "batch_size.auto",
        "a trainer.command script cannot be probed for the batch size that fits",
        "set auto: false, or search the batch size as a dimension",
    ),
]


test_bad_command = bad_file_test(BAD)


RUNNABLE_BAD = [
    ('"trainx", "--lr={lr}"', 0, "executable 'trainx' is not found on PATH"),
    ('"{python}", nope.py', 1, "no such script: 'nope.py' (trials run in the study file's"),
    ('"./nope.sh"', 0, "no such file: './nope.sh'"),
    ('"./plain.sh"', 0, "'./plain.sh' is not executable: chmod +x it"),
    (
        '"train.py"',
        0,
        """'train.py' is a file in the study folder: write ["{python}", "train.py",""",
    ),
    ('"run.sh"', 0, "'run.sh' is a file in the study folder: write './run.sh'"),
]


@pytest.mark.parametrize(("args", "index", "message"), RUNNABLE_BAD)
def test_the_executable_must_exist(
    write: Callable[..., Path], args: str, index: int, message: str
) -> None:
    write("print('hi')\n", name="train.py")
    write("echo hi\n", name="plain.sh")
    os.chmod(write("echo hi\n", name="run.sh"), 0o755)
    path = write(with_command(args))
    with pytest.raises(SpecError) as info:
        load_runnable(path)
    err = info.value
    assert (err.line, err.field) == (COMMAND_LINE, f"trainer.command[{index}]"), str(err)
    assert message in str(err)


@pytest.mark.processes
@pytest.mark.parametrize(
    ("args", "stdout"),
    [
        ('"{python}", train.py', "hi from python"),
        ('"./run.sh"', "hi from sh"),
        ("bash, -c, 'echo hi'", "hi"),
    ],
)
def test_an_executable_that_exists(
    write: Callable[..., Path], tmp_path: Path, args: str, stdout: str
) -> None:
    write("print('hi from python')\n", name="train.py")
    os.chmod(write("#!/bin/sh\necho hi from sh\n", name="run.sh"), 0o755)
    spec = load_runnable(write(with_command(args)))
    # The command the checks passed is one that runs, from the study's folder as trials do.
    argv = resolved(spec, {"lr": 0.01}, tmp_path / "runs" / "trial-0000", 0)
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, stdout), done.stderr


def test_an_objective_the_metrics_pattern_cannot_produce_is_refused(
    write: Callable[..., Path],
) -> None:
    """validate refuses it, at the objective's line, rather than every trial after training."""
    write("print('hi')\n", name="train.py")
    pattern = "  metrics_pattern: 'epoch (?P<step>\\d+) mse=(?P<val_mse>[0-9.]+)'\n"
    text = with_trainer_line(pattern) + "objective: {metric: val_loss}\n"
    with pytest.raises(SpecError) as info:
        load_runnable(write(text))
    assert (info.value.line, info.value.field) == (9, "objective.metric"), str(info.value)
    assert "metric 'val_loss' is never reported by trainer.metrics_pattern" in str(info.value)
    assert "(it reports: val_mse)" in str(info.value)
    assert load_runnable(write(text.replace("val_loss", "val_mse"))).objective.metric == "val_mse"
    # Without a pattern the script reports with dvt_hpo.report: its names are not known ahead.
    assert load_runnable(write(CMD + "objective: {metric: val_loss}\n")).objective.metric
