"""``dvt_hpo.report``: the helper a trainer.command script calls (stdlib only, self-contained).

Inside a study it is exercised by tests/command/test_trainer.py (real scripts, real worker)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import dvt_hpo.report
from dvt_hpo.report import ENV_REPORT, PRUNED_EXIT_CODE, report
from dvt_hpo.wire.protocol import EXIT_PRUNED


def test_outside_a_study_it_prints_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(ENV_REPORT, raising=False)
    report(3, {"loss": 0.123456789}, macro_f1=0.91)
    assert capsys.readouterr().out == "step 3: loss=0.123457 macro_f1=0.91\n"


@pytest.mark.parametrize(
    ("step", "metrics", "error"),
    [
        (-1, {"loss": 1.0}, "step must be an int >= 0, got -1"),
        (1.0, {"loss": 1.0}, "step must be an int >= 0, got 1.0"),
        (True, {"loss": 1.0}, "step must be an int >= 0, got True"),
        (0, {}, "needs at least one metric"),
        (0, {"loss": "low"}, "metric 'loss' must be a number, got 'low'"),
    ],
)
def test_bad_reports_raise_before_anything_is_sent(
    monkeypatch: pytest.MonkeyPatch, step: object, metrics: dict[str, object], error: str
) -> None:
    monkeypatch.setenv(ENV_REPORT, "/nonexistent/report.sock")  # never reached
    with pytest.raises((ValueError, TypeError), match=error):
        report(step, metrics)  # type: ignore[arg-type]


def test_a_missing_trial_process_is_a_connection_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ENV_REPORT, str(tmp_path / "gone.sock"))
    with pytest.raises(ConnectionError, match="cannot reach the dvt-hpo trial process"):
        report(0, loss=1.0)


def test_the_pruned_exit_code_is_the_workers() -> None:
    assert PRUNED_EXIT_CODE == EXIT_PRUNED == 3


def test_the_file_is_self_contained_for_vendoring() -> None:
    # Only stdlib imports: a team may copy the file into its own code base.
    source = Path(dvt_hpo.report.__file__).read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


@pytest.mark.processes
def test_importing_it_stays_light() -> None:
    code = (
        "import sys, dvt_hpo.report; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('dvt_hpo', 'torch', 'optuna', 'yaml', 'numpy')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "['dvt_hpo', 'dvt_hpo.exceptions', 'dvt_hpo.report']"


# -- one rule for a report's arguments, in a script and in an entry point --------------------


BAD_REPORTS = [
    (-1, {"loss": 1.0}, ValueError, "step must be an int >= 0"),
    (True, {"loss": 1.0}, ValueError, "step must be an int >= 0"),
    (0, {}, ValueError, "at least one metric"),
    (0, {"": 1.0}, TypeError, "non-empty strings"),
    (0, {3: 1.0}, TypeError, "non-empty strings"),
    (0, {"loss": "low"}, TypeError, "'loss' must be a number"),
    (0, [("loss", 1.0)], TypeError, "must be a dict of numbers"),
]


@pytest.mark.parametrize(("step", "metrics", "error", "message"), BAD_REPORTS)
def test_the_script_helper_and_the_context_refuse_the_same_reports(
    step: Any, metrics: Any, error: type[Exception], message: str
) -> None:
    import io

    from dvt_hpo.report import check_report
    from dvt_hpo.trial.context import LocalContext

    with pytest.raises(error, match=message):
        check_report(step, metrics)
    with pytest.raises(error, match=message):
        LocalContext(out=io.StringIO(), env={}).report(step, metrics)
