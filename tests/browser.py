"""Headless Chromium for the tests that check what a user sees (the dashboard, the report).

Debian's ``chromium`` package (``.ci/run`` installs it). Without it these tests skip with the
reason, except under CI (``CI`` set), where a missing browser is a failure.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
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
