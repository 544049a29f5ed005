"""Under CI a skip fails unless tests/ci_skips.py allows it: the rule on report values, then a
real pytest session run under CI and without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci_skips import BACKEND_ELSEWHERE, NEEDS_CUDA, REQUIRE_BACKEND, forbidden_skip


def test_cuda_skips_are_allowed_anywhere_and_others_are_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(REQUIRE_BACKEND, raising=False)
    assert forbidden_skip("tests/train/test_measure.py::test_on_cuda", NEEDS_CUDA) is None
    message = forbidden_skip(
        "tests/views/test_dashboard.py::test_page", "headless Chromium missing"
    )
    assert message is not None
    assert message.startswith(
        "skipped under CI: tests/views/test_dashboard.py::test_page: headless Chromium missing"
    )
    assert NEEDS_CUDA in message  # it says what is allowed
    xfail = forbidden_skip("tests/test_x.py::test_y", "xfail: not there yet")
    assert xfail is not None and "xfail: not there yet" in xfail


def test_backend_skips_are_allowed_in_tests_backends_only_unless_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reason = f"{BACKEND_ELSEWHERE}: it runs in its own virtualenv"
    monkeypatch.delenv(REQUIRE_BACKEND, raising=False)
    assert forbidden_skip("tests/backends/test_deepvisiontools_study.py::test_a", reason) is None
    assert forbidden_skip("tests/trial/test_main.py::test_a", reason) is not None
    monkeypatch.setenv(REQUIRE_BACKEND, "1")
    message = forbidden_skip("tests/backends/test_deepvisiontools_study.py::test_a", reason)
    assert message is not None and BACKEND_ELSEWHERE in message


INNER_CONFTEST = """
from tests.ci_skips import pytest_make_collect_report, pytest_runtest_makereport
"""
INNER_TESTS = {
    "test_skips.py": f"""
import pytest

def test_runs():
    pass

def test_skipped_in_the_body():
    pytest.skip("no server here")

@pytest.mark.skipif(True, reason="no browser here")
def test_skipped_by_a_mark():
    pass

@pytest.mark.skipif(True, reason="{NEEDS_CUDA}")
def test_on_cuda():
    pass

@pytest.mark.xfail(reason="not there yet")
def test_expected_to_fail():
    raise AssertionError
""",
    "test_module_skip.py": """
import pytest

pytest.importorskip("a_module_that_is_not_installed")

def test_never_collected():
    pass
""",
}


def _inner_session(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # tmp_path is the inner rootdir
    tests = tmp_path / "tests"
    tests.mkdir(exist_ok=True)
    (tests / "conftest.py").write_text(INNER_CONFTEST)
    for name, text in INNER_TESTS.items():
        (tests / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", REQUIRE_BACKEND)}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider"),
            # A forbidden module-level skip is a collection error, which would end the session.
            *("--continue-on-collection-errors", "tests"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.processes
def test_under_ci_each_forbidden_skip_fails_naming_the_test_and_its_reason(
    tmp_path: Path,
) -> None:
    done = _inner_session(tmp_path, "true")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    for test, reason in [
        ("tests/test_skips.py::test_skipped_in_the_body", "no server here"),
        ("tests/test_skips.py::test_skipped_by_a_mark", "no browser here"),
        ("tests/test_skips.py::test_expected_to_fail", "xfail: not there yet"),
        ("tests/test_module_skip.py", "could not import 'a_module_that_is_not_installed'"),
    ]:
        assert f"skipped under CI: {test}: {reason}" in out, out
    assert "PASSED tests/test_skips.py::test_runs" in out, out
    assert f"SKIPPED [1] tests/test_skips.py:14: {NEEDS_CUDA}" in out, out
    # A skip in setup (a mark, a fixture) shows as an error, one in the test's body a failure.
    assert "2 failed, 1 passed, 1 skipped, 2 errors" in out, out


@pytest.mark.processes
@pytest.mark.parametrize("ci", [None, "false"])
def test_without_ci_skips_are_skips(tmp_path: Path, ci: str | None) -> None:
    done = _inner_session(tmp_path, ci)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "skipped under CI" not in out
    assert "1 passed, 4 skipped, 1 xfailed" in out, out
