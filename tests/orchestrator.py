"""A real ``dvt-hpo run`` as a test drives it: the orchestrator subprocess whose output lines a
test awaits, the FIFO handshake that makes a trial observable and blockable without sleeping,
the processes a study's trials left, and the trials read back from the study file's storage.

The toy entry point's first two actions (:func:`fifo_study`): it *writes* to a FIFO (blocks until
the test opens it for reading: when the test has read the text, the trial is running), then
*reads* the same FIFO (blocks until the test opens it for writing). Removing the FIFO turns both
actions into plain file I/O, so the same study then runs to the end. The fixtures that start
orchestrators and clean up after them (``orchestrator``, ``runs_dir``) are in tests/conftest.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import optuna

from dvt_hpo.process import tree as process_tree
from dvt_hpo.studyfile import load_spec
from tests.conftest import REPO_ROOT, TOY_ENTRYPOINT, toy_study

# Every wait on the orchestrator or a trial is bounded by this (a hang fails, never blocks).
EVENT_TIMEOUT_S = 30.0
# A whole run to its end: a bound against a hang, not a speed check. Two workers running a few
# trials under coverage on 2 loaded cores took over 30 s (the budget tests, CI).
FINISH_TIMEOUT_S = 180.0
RUNNING_TEXT = "running"


# -- the FIFO handshake -------------------------------------------------------------------


def _open_fifo(path: Path, flags: int, timeout_s: float) -> int:
    """Open one end of a FIFO (which blocks until the other end is opened), within timeout_s."""
    opened: list[int] = []
    opener = threading.Thread(target=lambda: opened.append(os.open(path, flags)), daemon=True)
    opener.start()
    opener.join(timeout_s)
    if opener.is_alive():
        # Free the opener thread by opening the other end ourselves (non-blocking succeeds
        # because the opener already counts as a reader or writer), then give up.
        other = os.O_WRONLY if (flags & os.O_ACCMODE) == os.O_RDONLY else os.O_RDONLY
        fd = os.open(path, other | os.O_NONBLOCK)
        opener.join()
        os.close(fd)
        os.close(opened[0])
        raise TimeoutError(f"nobody opened the other end of {path} within {timeout_s} s")
    return opened[0]


def wait_trial_running(fifo: Path, timeout_s: float = EVENT_TIMEOUT_S) -> None:
    """Return once a trial wrote to ``fifo``: it is running, and next blocks reading it."""
    with os.fdopen(_open_fifo(fifo, os.O_RDONLY, timeout_s), "rb") as f:
        text = f.read()  # until the toy closes its end
    assert text == RUNNING_TEXT.encode(), text


def release_trial(fifo: Path, timeout_s: float = EVENT_TIMEOUT_S) -> None:
    """Let the trial blocked reading ``fifo`` go on: it reads end-of-file, then its curve."""
    os.close(_open_fifo(fifo, os.O_WRONLY, timeout_s))


def fifo_study(name: str, fifo: Path, **sections: Any) -> dict[str, Any]:
    config = {
        "curve": [0.1, 0.2, 0.3],
        "actions": [
            {"do": "write", "path": str(fifo), "text": RUNNING_TEXT},
            {"do": "read", "path": str(fifo)},
            {"do": "curve"},
        ],
    }
    study = {"heartbeat_interval_s": 1, "grace_period_s": 2, **sections.pop("study", {})}
    return toy_study(
        name,
        study=study,
        trainer={"entrypoint": TOY_ENTRYPOINT, "config": config},
        **sections,
    )


# -- processes ----------------------------------------------------------------------------


def processes_mentioning(marker: Path) -> list[int]:
    """Live (not zombie) processes whose command line contains ``marker``: trial processes
    carry their payload path (under the study's runs folder) on theirs, torchrun ranks too."""
    needle = os.fsencode(marker)
    found: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path("/proc", name, "cmdline").read_bytes()
        except OSError:
            continue  # it exited while we looked
        if needle in cmdline and process_tree.pid_alive(int(name)):
            found.append(int(name))
    return found


class Orchestrator:
    """One ``dvt-hpo run`` subprocess in a session of its own (like a shell's foreground job);
    a thread collects its output lines, so a test can await one."""

    def __init__(self, study: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dvt_hpo", "run", str(study), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=REPO_ROOT,
            start_new_session=True,
            env=None if env is None else {**os.environ, **env},
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            with self._changed:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                self._changed.notify_all()
        self.proc.stdout.close()

    def output(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def wait_line(self, text: str, timeout_s: float = EVENT_TIMEOUT_S) -> None:
        """Wait until a line of the output contains ``text``."""
        with self._changed:
            if not self._changed.wait_for(lambda: any(text in x for x in self.lines), timeout_s):
                raise AssertionError(f"no line with {text!r} within {timeout_s} s:\n{self.lines}")

    def finish(self, timeout_s: float = FINISH_TIMEOUT_S) -> tuple[int, str]:
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"dvt-hpo run did not finish within {timeout_s} s; output:\n{self.output()}"
            ) from None
        self._reader.join(timeout_s)
        return code, self.output()


def load_trials(study: Path) -> list[optuna.trial.FrozenTrial]:
    spec = load_spec(study)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    loaded = optuna.load_study(study_name=spec.study.name, storage=spec.study.storage)
    return sorted(loaded.get_trials(deepcopy=False), key=lambda t: t.number)


def states(trials: list[optuna.trial.FrozenTrial]) -> list[tuple[int, str]]:
    return [(t.number, t.state.name) for t in trials]


def snapshot(trial: optuna.trial.FrozenTrial) -> tuple[Any, ...]:
    return (
        trial.state.name,
        trial.value,
        trial.params,
        trial.datetime_start,
        trial.datetime_complete,
    )
