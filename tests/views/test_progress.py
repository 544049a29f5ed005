"""Live progress: rich's live view on a pseudo-terminal, plain lines on a pipe."""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys

import pytest

from dvt_hpo.results.events import StudyStarted, TrialFinished, TrialReported, TrialStarted
from dvt_hpo.study.messages import trial_line
from dvt_hpo.views.progress import ProgressObserver
from tests.conftest import REPO_ROOT

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _started(n_trials: int | None = 4, n_done: int = 0) -> StudyStarted:
    return StudyStarted("s", "sqlite:///s.db", "minimize", "loss", n_trials, n_done, "/s.yaml", {})


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_mode_prints_finished_trials_and_throttles_epoch_lines() -> None:
    stream = io.StringIO()
    clock = Clock()
    observer = ProgressObserver(stream, report_every_s=10, clock=clock)
    assert not observer.live_mode
    observer.study_started(_started())
    observer.trial_started(TrialStarted(0, 1, {"lr": 0.1}, None, 0.0))
    observer.trial_started(TrialStarted(1, 2, {"lr": 0.2}, 0, 0.0))
    for step in range(5):  # 5 reports within 4 s: one line per trial
        clock.now += 1
        observer.trial_reported(TrialReported(0, step, {"loss": 1.0 / (step + 1)}, step))
    observer.trial_reported(TrialReported(1, 0, {"loss": 0.7}, 1.0))
    clock.now += 10
    observer.trial_reported(TrialReported(0, 5, {"loss": 0.1}, 15.0))
    observer.trial_finished(TrialFinished(0, 1, "COMPLETE", 0.1, {"lr": 0.1}, None, 16.0, {}))
    observer.trial_finished(
        TrialFinished(1, 2, "FAIL", None, {"lr": 0.2}, "RuntimeError: boom", 2.0, {})
    )
    observer.close()
    lines = stream.getvalue().splitlines()
    assert lines == [
        "trial   0 epoch 0    loss=1.0000  0:00:00",
        "trial   1 epoch 0    loss=0.7000  0:00:01",
        "trial   0 epoch 5    loss=0.1000  0:00:15",
        "trial   0 COMPLETE loss=0.1000          16.0s  lr=0.1",
        "trial   1 FAIL                           2.0s  lr=0.2 reason: RuntimeError: boom",
    ]
    assert not ANSI.search(stream.getvalue())


def test_plain_mode_without_epoch_lines_and_eta() -> None:
    stream = io.StringIO()
    clock = Clock()
    observer = ProgressObserver(stream, report_every_s=None, clock=clock)
    observer.study_started(_started(n_trials=4, n_done=1))
    assert observer.eta_s() is None
    observer.trial_started(TrialStarted(1, 1, {}, None, 0.0))
    observer.trial_reported(TrialReported(1, 0, {"loss": 0.5}, 1.0))
    clock.now += 30
    observer.trial_finished(TrialFinished(1, 1, "PRUNED", None, {}, "pruned", 30.0, {}))
    # 2 of 4 done, 1 of them in 30 s here: 2 left take 60 s.
    assert observer.eta_s() == pytest.approx(60.0)
    assert stream.getvalue().splitlines() == [
        "trial   1 PRUNED                        30.0s   reason: pruned"
    ]


def test_trial_line_keeps_the_loop_format() -> None:
    event = TrialFinished(
        7, 8, "COMPLETE", 0.98765, {"lr": 0.001234, "w": 32}, None, 3.04, {"batch_size": 512}
    )
    assert trial_line(event, "macro_f1") == (
        "trial   7 COMPLETE macro_f1=0.9877       3.0s  lr=0.001234 w=32 batch=512"
    )


def _run_driver(stdout: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, COLUMNS="120", LINES="40", TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.drive_progress"],
        stdout=stdout,
        stderr=subprocess.PIPE,
        cwd=REPO_ROOT,
        env=env,
    )


@pytest.mark.processes
def test_live_view_on_a_terminal() -> None:
    leader, follower = pty.openpty()
    proc = _run_driver(follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's last writer closed it
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=60) == 0, proc.stderr.read().decode() if proc.stderr else ""
    raw = b"".join(chunks).decode("utf-8", "replace")
    plain = ANSI.sub("", raw)
    # Redrawn in place: cursor movement and line erasing, not a scroll of copies.
    assert "\x1b[2K" in raw and re.search(r"\x1b\[\d*A", raw)
    assert "trials" in plain and "1/5" in plain and "3/5" in plain and "[bold]" not in plain
    assert "eta" in plain
    # The running-trials table: trial, epoch, latest objective, elapsed, params.
    assert re.search(r"2\s+2\s+0\.7321\s+0:00:\d\d\s+lr=0\.02", plain), plain
    # Messages and finished trials print above the live view.
    assert "study 'drive': 1/5 trials done" in plain
    assert "trial   1 COMPLETE macro_f1=0.8123" in plain and "batch=64" in plain
    assert "trial   2 PRUNED" in plain and "reason: pruned at step 2" in plain


@pytest.mark.processes
def test_plain_lines_on_a_pipe() -> None:
    proc = _run_driver(subprocess.PIPE)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    text = out.decode()
    assert not ANSI.search(text)
    assert text.splitlines() == [
        "study 'drive': 1/5 trials done, 2 at a time",
        "trial   1 epoch 0    macro_f1=0.5000  0:00:01",
        "trial   2 epoch 2    macro_f1=0.7321  0:00:02",
        "trial   1 COMPLETE macro_f1=0.8123       3.2s  lr=0.01 batch=64",
        "trial   2 PRUNED                         2.1s  lr=0.02 reason: pruned at step 2",
    ]
