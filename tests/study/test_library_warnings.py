"""dvt_hpo/study/library_warnings.py: a library's warning is one line in dvt-hpo's voice, once."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml

from dvt_hpo.study.library_warnings import MEANINGS, WILCOXON_NO_CURVE, one_line, said_once
from tests.conftest import toy_study
from tests.test_cli import run_cli

OPTUNA_FILE = "/venv/lib/python3.11/site-packages/optuna/trial/_trial.py"


def _warn_from(filename: str, message: str, category: type[Warning] = UserWarning) -> None:
    warnings.warn_explicit(message, category, filename, 543, module="optuna.trial._trial")


def test_a_warning_is_one_line_naming_its_library_said_once() -> None:
    said: list[str] = []
    with warnings.catch_warnings(), said_once(said.append):
        warnings.simplefilter("always")  # Python's own once-per-location rule out of the way
        _warn_from(OPTUNA_FILE, "something odd\n  in two lines")
        _warn_from(OPTUNA_FILE, "something odd\n  in two lines")
        _warn_from(OPTUNA_FILE, "another thing", FutureWarning)

    assert said == [
        "warning from optuna: something odd in two lines (UserWarning)",
        "warning from optuna: another thing (FutureWarning)",
    ]


def test_outside_the_block_python_shows_warnings_as_before() -> None:
    before = warnings.showwarning
    with said_once(lambda line: None):
        assert warnings.showwarning is not before
    assert warnings.showwarning is before


def test_the_filters_still_decide_what_is_shown() -> None:
    said: list[str] = []
    with warnings.catch_warnings(), said_once(said.append):
        warnings.simplefilter("ignore")
        _warn_from(OPTUNA_FILE, "ignored")
    assert said == []


def test_wilcoxon_without_a_best_curve_is_said_as_what_it_means() -> None:
    line = one_line(WILCOXON_NO_CURVE, UserWarning, OPTUNA_FILE)
    assert line == MEANINGS[WILCOXON_NO_CURVE]
    assert line.startswith(
        "note: the Wilcoxon test prunes nothing until a trial that reported a curve is the best"
    )
    assert "WilcoxonPruner" not in line and "_trial.py" not in line


@pytest.mark.processes
def test_a_resumed_study_whose_best_trial_has_no_curve_says_so_once(tmp_path: Path) -> None:
    # First run: one trial that reports no epoch and returns its value (the best, 0.9).
    doc = toy_study(
        "no-curve",
        study={"n_trials": 1, "pruner": {"kind": "wilcoxon_halving"}},
        trainer={
            "entrypoint": "tests.entrypoints.toy:run",
            "config": {"curve": [], "return": {"score": 0.9}},
        },
    )
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    first = run_cli("run", "study.yaml", cwd=tmp_path)
    assert first.code == 0, first.err
    # (TPE univariate with it is the short-curve default: the line may add "— the defaults".)
    assert "pruner Wilcoxon + successive halving (p 0.1, min resource 3, reduction factor 3)" in (
        first.out
    )
    assert "0/1 trials done" in first.out

    # Resumed with trials that report a curve under it: each report asks the pruner.
    resumed = run_cli(
        "run",
        "study.yaml",
        "--set",
        "study.n_trials=3",
        "--set",
        "trainer.config.curve=[0.1, 0.2, 0.3, 0.4]",
        "--set",
        "trainer.config.return=null",
        cwd=tmp_path,
    )

    assert resumed.code == 0, resumed.err
    assert resumed.err.count(MEANINGS[WILCOXON_NO_CURVE]) == 1, resumed.err
    assert "Warning:" not in resumed.err and ".py:" not in resumed.err, resumed.err
    assert "return self.study" not in resumed.err, resumed.err
