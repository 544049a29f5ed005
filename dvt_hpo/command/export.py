"""``dvt-hpo best --export`` for a command trainer, and ``dvt-hpo train`` of that export.

A command trainer has no trainer config to train: what reruns a trial is its command line. The
export holds the trial's exact argv, every placeholder filled in as the trial's worker filled
it (:func:`dvt_hpo.command.script._lookup`'s names: the params, the fixed ``trainer.config`` values,
``{python}`` as this interpreter), the folder trials run in (the study file's), and the CPU
threads the trial got (``OMP_NUM_THREADS``: a thread count changes the numbers)::

    # trial 3 of study 'command-trainer-digits'
    command: [/venv/bin/python, train.py, --lr, '0.0123', --hidden, '64', ...]
    cwd: /home/me/studies/command-trainer
    env: {OMP_NUM_THREADS: '1', MKL_NUM_THREADS: '1'}

``dvt-hpo train best.yaml`` runs it there with that environment (its output as the script
prints it; ``dvt_hpo.report`` prints its reports outside a study), or paste ``cd CWD && ARGV``.
``{config}``/``{config_json}``/``{trial_dir}`` point to a folder next to the export
(``best-files/``), written with the trial's config only when the command uses them.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dvt_hpo.atomic import write_json_atomic, write_text_atomic
from dvt_hpo.command.template import placeholders, render
from dvt_hpo.config.hints import describe
from dvt_hpo.config.paths import get_path
from dvt_hpo.exceptions import DvtHpoError, SpecError

__all__ = ["CommandExport", "command_export", "read_command_export", "run_command_export"]

_KEYS = ("study", "trial", "command", "cwd", "env")
_FILES = ("config", "config_json", "trial_dir")


@dataclass(frozen=True)
class CommandExport:
    command: list[str]
    cwd: str
    env: dict[str, str]
    study: str | None = None
    trial: int | None = None

    def by_hand(self) -> str:
        """The shell line that reruns it."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"cd {shlex.quote(self.cwd)} && {env + ' ' if env else ''}{shlex.join(self.command)}"


def command_export(
    spec: Any, trial: Any, config: Mapping[str, Any], export: Path
) -> dict[str, Any]:
    """The export of ``trial`` (its ``config``: the one it ran with) as plain data."""
    command = spec.trainer.command
    names = {d.name: d.path for d in spec.search_space}
    used = {name for arg in command for name in placeholders(arg)}
    files = export.parent / f"{export.stem}-files"
    reserved: dict[str, Any] = {
        "config": str(files / "config.yaml"),
        "config_json": str(files / "config.json"),
        "trial_dir": str(files),
        "trial_number": trial.number,
        "python": sys.executable,
    }
    if used & set(_FILES):
        files.mkdir(exist_ok=True)
        write_text_atomic(files / "config.yaml", yaml.safe_dump(dict(config), sort_keys=False))
        write_json_atomic(files / "config.json", dict(config))

    def lookup(name: str) -> Any:
        if name in reserved:
            return reserved[name]
        return get_path(config, names.get(name, name))

    env: dict[str, str] = {}
    threads = trial.user_attrs.get("threads")
    if isinstance(threads, int) and not isinstance(threads, bool):
        env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    return {
        "study": spec.study.name,
        "trial": trial.number,
        "command": render(command, lookup),
        "cwd": str(spec.path.parent),
        "env": env,
    }


def read_command_export(path: Path) -> CommandExport | None:
    """The command export at ``path``, or ``None`` when it is not one (a trainer config)."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None  # the trainer config reader says what is wrong with it
    if not isinstance(data, Mapping) or "command" not in data:
        return None
    where = f"{path}"
    unknown = [k for k in data if k not in _KEYS]
    if unknown:
        raise SpecError(
            f"unknown key {unknown[0]!r} in a command export (keys: {', '.join(_KEYS)})",
            file=where,
        )
    command, cwd, env = data.get("command"), data.get("cwd", "."), data.get("env") or {}
    if not (isinstance(command, list) and command and all(isinstance(a, str) for a in command)):
        raise SpecError(
            f"must be a non-empty list of strings, got {describe(command)}",
            file=where,
            field="command",
        )
    if not isinstance(cwd, str):
        raise SpecError(f"must be a folder, got {describe(cwd)}", file=where, field="cwd")
    if not (isinstance(env, Mapping) and all(isinstance(v, str) for v in env.values())):
        raise SpecError(f"must map names to strings, got {describe(env)}", file=where, field="env")
    folder = (path.parent / cwd).resolve()
    if not folder.is_dir():
        raise SpecError(f"no such folder: {cwd!r}", file=where, field="cwd")
    trial = data.get("trial")
    return CommandExport(
        command=list(command),
        cwd=str(folder),
        env={str(k): v for k, v in env.items()},
        study=data.get("study") if isinstance(data.get("study"), str) else None,
        trial=trial if isinstance(trial, int) else None,
    )


def run_command_export(export: CommandExport) -> None:
    """Run the exported command to its end in its folder and environment; a failure is one
    line (exit 1)."""
    from dvt_hpo.process.tree import describe_exit

    what = f"trial {export.trial}'s command" if export.trial is not None else "the command"
    print(f"running {what}: {export.by_hand()}", flush=True)
    try:
        code = subprocess.run(
            export.command, cwd=export.cwd, env={**os.environ, **export.env}, check=False
        ).returncode
    except OSError as exc:
        raise DvtHpoError(f"cannot run {export.command[0]!r}: {exc.strerror or exc}") from None
    if code != 0:
        raise DvtHpoError(f"{what} ended with {describe_exit(code)}")
    print(f"done: {what} exited 0", flush=True)
