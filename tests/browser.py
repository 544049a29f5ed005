"""Headless Chromium for the tests that check what a user sees (the dashboard, the report).

Debian's ``chromium`` package (``.ci/run`` installs it). Without it these tests skip with the
reason, except under CI (``CI`` set), where a missing browser is a failure.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.ci_skips import under_ci
from tests.conftest import REPO_ROOT

# Kept after the run, for a person to look at (CI uploads nothing, but a developer can).
ARTIFACTS = REPO_ROOT / "tests" / "artifacts"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        reason = "headless Chromium not installed (apt-get install chromium; .ci/run does)"
        if under_ci():
            pytest.fail(reason + " and CI is set")
        pytest.skip(reason)
    return found


def _run(args: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        return subprocess.run(
            [chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )


def dump_dom(
    url: str, *, budget_ms: int = 10_000, offline: bool = False, timeout_s: float = 120
) -> str:
    """The DOM of ``url`` after its scripts ran for ``budget_ms`` of virtual time."""
    extra = ["--host-resolver-rules=MAP * ~NOTFOUND"] if offline else []
    done = _run([*extra, f"--virtual-time-budget={budget_ms}", "--dump-dom", url], timeout_s)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def screenshot(
    url: str,
    path: Path,
    *,
    size: tuple[int, int] = (1280, 900),
    budget_ms: int = 10_000,
    offline: bool = False,
    timeout_s: float = 120,
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    extra = ["--host-resolver-rules=MAP * ~NOTFOUND"] if offline else []
    done = _run(
        [
            *extra,
            f"--virtual-time-budget={budget_ms}",
            f"--window-size={size[0]},{size[1]}",
            f"--screenshot={path}",
            url,
        ],
        timeout_s,
    )
    assert done.returncode == 0 and path.exists(), done.stderr[-2000:]
    return path


def evaluate(url: str, expression: str, *, timeout_s: float = 60) -> object:
    """Open ``url`` and return the value of the JavaScript ``expression`` evaluated in it (a
    promise is awaited: poll for what a page's scripts render, instead of a fixed budget).

    Through the DevTools protocol on a pipe (``--remote-debugging-pipe``: the browser reads
    commands on fd 3 and answers on fd 4, NUL-terminated JSON), so nothing beyond the browser
    is needed; ``--dump-dom``'s virtual time does not run a page's web workers (a site's search).
    """
    import json
    import os

    to_browser_r, to_browser_w = os.pipe()
    from_browser_r, from_browser_w = os.pipe()

    def wire() -> None:  # in the child: its fds 3 and 4, through fds no pipe end holds
        os.dup2(to_browser_r, 13)
        os.dup2(from_browser_w, 14)
        os.dup2(13, 3)
        os.dup2(14, 4)

    with tempfile.TemporaryDirectory(prefix="chromium-", ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen(
            [chromium(), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe"],
            preexec_fn=wire,
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        pending = b""
        sent = 0
        events: list[str] = []

        def read_until(done: Callable[[dict], bool]) -> dict:
            nonlocal pending
            while True:
                while b"\0" in pending:
                    raw, pending = pending.split(b"\0", 1)
                    message = json.loads(raw)
                    if "method" in message:
                        events.append(message["method"])
                    if done(message):
                        return message
                chunk = os.read(from_browser_r, 1 << 16)
                assert chunk, "the browser closed its DevTools pipe"
                pending += chunk

        def call(method: str, params: dict, session: str | None = None) -> dict:
            nonlocal sent
            sent += 1
            message: dict = {"id": sent, "method": method, "params": params}
            if session is not None:
                message["sessionId"] = session
            os.write(to_browser_w, json.dumps(message).encode() + b"\0")
            answer = read_until(lambda m: m.get("id") == sent)
            assert "error" not in answer, answer["error"]
            return answer["result"]

        try:
            target = call("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = call("Target.attachToTarget", {"targetId": target, "flatten": True})[
                "sessionId"
            ]
            call("Page.enable", {}, session)
            call("Page.navigate", {"url": url}, session)
            if "Page.loadEventFired" not in events:
                read_until(lambda m: m.get("method") == "Page.loadEventFired")
            result = call(
                "Runtime.evaluate",
                {
                    "expression": expression,
                    "awaitPromise": True,
                    "returnByValue": True,
                    "timeout": int(timeout_s * 1000),
                },
                session,
            )
            assert "exceptionDetails" not in result, result["exceptionDetails"]
            return result["result"].get("value")
        finally:
            # Closed through the protocol, so its helper processes are gone before the profile
            # folder is removed; killed if it does not close.
            try:
                os.write(to_browser_w, b'{"id": 0, "method": "Browser.close"}\0')
                proc.wait(timeout=15)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
            os.close(to_browser_w)
            os.close(from_browser_r)
