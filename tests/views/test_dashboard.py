"""``dvt-hpo dashboard``: optuna-dashboard on the study's storage, checked in a real browser."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from dvt_hpo.cli import EXIT_FAILURE, main
from tests.browser import ARTIFACTS, chromium, dump_dom, screenshot
from tests.conftest import REPO_ROOT, toy_study
from tests.made_study import make_study


class Served:
    def __init__(self, proc: subprocess.Popen[str], url: str, lines: list[str]) -> None:
        self.proc = proc
        self.url = url
        self.lines = lines


@pytest.fixture
def served(tmp_path: Path, free_port: int) -> Iterator[Served]:
    chromium()  # skip before starting anything when there is no browser
    make_study(tmp_path)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dvt_hpo",
            "dashboard",
            str(tmp_path / "study.yaml"),
            "--port",
            str(free_port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    lines: list[str] = []
    url = None
    try:
        assert proc.stdout is not None
        # The command prints its address once the socket is bound.
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if " listening on http://" in line:
                url = line.split(" listening on ", 1)[1].split()[0]
                break
        assert url is not None and proc.poll() is None, "\n".join(lines)
        yield Served(proc, url, lines)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.processes
def test_dashboard_shows_the_study_and_its_trials(served: Served, free_port: int) -> None:
    assert served.url == f"http://127.0.0.1:{free_port}/dashboard/studies/1"
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with direct.open(f"http://127.0.0.1:{free_port}/api/studies", timeout=10) as r:
        assert b'"study_name": "seeing"' in r.read()

    dom = dump_dom(served.url + "/trials", budget_ms=15_000)
    assert "seeing" in dom
    for number in range(7):
        assert f"Trial {number}" in dom, dom[:3000]
    # The runner's user attrs are what makes a trial readable there.
    assert "batch_size" in dom and "host" in dom and "gpu-0" in dom

    page = dump_dom(served.url, budget_ms=15_000)
    assert "seeing" in page and "History" in page
    shot = screenshot(served.url, ARTIFACTS / "dashboard.png", size=(1400, 1000), budget_ms=15_000)
    assert shot.stat().st_size > 20_000
    screenshot(served.url + "/trials", ARTIFACTS / "dashboard-trials.png", size=(1400, 1000))


@pytest.mark.processes
def test_dashboard_ends_cleanly_on_ctrl_c(served: Served) -> None:
    served.proc.send_signal(signal.SIGINT)
    assert served.proc.wait(10) == 0
    rest = served.proc.stdout.read() if served.proc.stdout else ""
    assert "Traceback" not in rest


def test_dashboard_of_a_study_not_run_creates_nothing(
    tmp_path: Path, write_study, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_study(toy_study("none-yet"))
    assert main(["dashboard", str(path), "--port", "1"]) == EXIT_FAILURE
    assert "no study database yet" in capsys.readouterr().err
    assert not (tmp_path / "none-yet.db").exists()


def test_dashboard_port_in_use_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_study(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        started = time.monotonic()
        code = main(["dashboard", str(tmp_path / "study.yaml"), "--port", str(port)])
    assert code == EXIT_FAILURE and time.monotonic() - started < 30
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: cannot serve on 127.0.0.1:{port}") and "\n" not in err


def test_dashboard_without_the_extra_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    make_study(tmp_path)
    monkeypatch.setitem(sys.modules, "optuna_dashboard", None)
    assert main(["dashboard", str(tmp_path / "study.yaml")]) == EXIT_FAILURE
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: dvt-hpo dashboard needs optuna-dashboard: pip install 'dvt-hpo[dashboard]'"
    )
