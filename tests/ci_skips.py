"""Under CI, a skipped test is a failed one, except for the few skips named in :data:`ALLOWED`.

A skip says "this was not tested"; on a developer's laptop that is often fine (no browser, no
PostgreSQL server), but CI is where the whole suite must run: a skip there hides whatever broke
the thing the test needed (an import, a binary, a server). So when ``CI`` is set (``.ci/run``
sets it), each skip (and each ``xfail``) outside the allow-list is reported as a failure naming
the test and the reason it gave, at collection time too (a module-level ``importorskip``).

The hooks are imported into ``tests/conftest.py``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator
from dataclasses import dataclass

import pytest

NEEDS_CUDA = "needs a CUDA device"
# The reason of tests/backends' skip outside the backend's own virtualenv.
BACKEND_ELSEWHERE = "deepvisiontools is not installed here"
# Set by .ci/run for its run of tests/backends in .venv-dvt: there the backend must run.
REQUIRE_BACKEND = "DVT_HPO_REQUIRE_BACKEND"


def under_ci() -> bool:
    """``CI`` set to anything but empty, ``0`` or ``false`` (``.ci/run`` sets ``CI=true``)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def backend_required() -> bool:
    return os.environ.get(REQUIRE_BACKEND) == "1"


@dataclass(frozen=True)
class AllowedSkip:
    """A skip CI accepts: its reason starts with ``reason``, the test's id with ``where``, and
    ``applies()`` holds now."""

    reason: str
    where: str
    why: str  # why CI cannot run these tests
    applies: Callable[[], bool] = lambda: True

    def allows(self, nodeid: str, reason: str) -> bool:
        return nodeid.startswith(self.where) and reason.startswith(self.reason) and self.applies()


ALLOWED = (
    AllowedSkip(NEEDS_CUDA, "tests/", "CI's machine has no GPU"),
    AllowedSkip(
        BACKEND_ELSEWHERE,
        "tests/backends/",
        "the core virtualenv keeps torch 2.13.0; .ci/run runs tests/backends in .venv-dvt, "
        f"with {REQUIRE_BACKEND}=1",
        applies=lambda: not backend_required(),
    ),
)


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The reason a skipped (or xfailed) report gives, without pytest's ``Skipped: ``."""
    wasxfail = getattr(report, "wasxfail", None)
    if wasxfail is not None:
        return f"xfail: {wasxfail}" if wasxfail else "xfail"
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return str(text).removeprefix("Skipped: ")


def forbidden_skip(nodeid: str, reason: str) -> str | None:
    """The failure message for a skip CI does not allow, or ``None`` when it is allowed."""
    if any(a.allows(nodeid, reason.removeprefix("xfail: ")) for a in ALLOWED):
        return None
    allowed = "; ".join(f"{a.reason!r} ({a.why})" for a in ALLOWED if a.applies())
    return (
        f"skipped under CI: {nodeid}: {reason}\n"
        f"CI runs every test; the skips it allows are: {allowed or 'none here'}. Install what "
        "the test needs in .ci/run, or make the test run without it."
    )


def _fail_if_forbidden(report: pytest.TestReport | pytest.CollectReport) -> None:
    if not report.skipped or not under_ci():
        return
    message = forbidden_skip(report.nodeid, skip_reason(report))
    if message is not None:
        report.outcome = "failed"
        report.longrepr = message
        if hasattr(report, "wasxfail"):
            del report.wasxfail


# tryfirst: outside pytest's own wrappers, so the report is final (xfail already applied).
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    _fail_if_forbidden(report)
    return report


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    _fail_if_forbidden(report)
    return report
