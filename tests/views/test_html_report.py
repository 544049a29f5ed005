"""``dvt-hpo report``: one HTML file with Optuna's plots that renders with no network."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import optuna
import pytest

from dvt_hpo.cli import EXIT_FAILURE, EXIT_OK, main
from dvt_hpo.store.opening import StudyAt
from dvt_hpo.views.html_report import render_report
from tests.browser import ARTIFACTS, dump_dom, screenshot
from tests.conftest import toy_study
from tests.made_study import make_study


def test_report_is_one_self_contained_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_study(tmp_path)
    out = tmp_path / "report.html"
    assert main(["report", str(tmp_path / "study.yaml"), "-o", str(out)]) == EXIT_OK
    assert f"wrote {out}" in capsys.readouterr().out
    text = out.read_text()
    # plotly's JS once, inline; nothing fetched from anywhere.
    assert text.count("plotly.js v") >= 1 and len(text) > 3_000_000
    assert not re.search(r"<script[^>]+src=", text)
    # The learning curves hold the pruned trial (4) and the running one (6), not only complete.
    assert '"name":"Trial4"' in text and '"name":"Trial6"' in text
    for heading in (
        "Optimization history",
        "Parameter importances",
        "Parallel coordinates",
        "Intermediate values",
        "Trials (7)",
    ):
        assert heading in text
    # The table: every trial, the failure's reason, the batch size.
    assert "CUDA out of memory at batch 512" in text
    assert '<tr class="PRUNED">' in text and '<tr class="RUNNING">' in text


def test_importances_are_skipped_with_a_note_below_two_complete_trials(tmp_path: Path) -> None:
    spec = make_study(tmp_path)
    study = StudyAt.of(spec).load().study
    lone = optuna.create_study(study_name="lone", storage=spec.study.storage)
    lone.add_trial(study.get_trials()[0])
    text = render_report(lone, spec)
    assert "skipped: needs at least 2 complete trials" in text
    assert "Optimization history" in text


def test_report_of_a_study_not_run_writes_nothing(
    tmp_path: Path, write_study, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_study(toy_study("nothing"))
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == EXIT_FAILURE
    assert "no study database yet" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "nothing.db").exists()


@pytest.mark.processes
def test_report_renders_offline_in_a_browser(tmp_path: Path) -> None:
    spec = make_study(tmp_path)
    out = tmp_path / "report.html"
    out.write_text(render_report(StudyAt.of(spec).load().study, spec))
    dom = dump_dom(out.as_uri(), offline=True)
    # Every plot rendered: plotly replaces each graph div's content with its SVG layers.
    graphs = re.findall(r'<div id="[^"]+" class="plotly-graph-div[^"]*"', dom)
    assert len(graphs) == 4, dom[:2000]
    assert dom.count('class="main-svg"') >= 2 * len(graphs)
    assert "Trials (7)" in dom
    screenshot(out.as_uri(), ARTIFACTS / "report.png", size=(1280, 2400), offline=True)


def test_report_without_plotly_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    make_study(tmp_path)
    monkeypatch.setitem(sys.modules, "plotly", None)  # import plotly -> ImportError
    out = tmp_path / "r.html"
    assert main(["report", str(tmp_path / "study.yaml"), "-o", str(out)]) == EXIT_FAILURE
    err = capsys.readouterr().err.strip()
    assert err == "error: dvt-hpo report needs plotly: pip install 'dvt-hpo[report]'"
    assert not out.exists()


def test_a_study_without_results_gets_notes_not_plots(tmp_path: Path) -> None:
    spec = make_study(tmp_path)
    empty = optuna.create_study(study_name="empty", storage=spec.study.storage)
    failed = empty.ask()
    empty.tell(failed, state=optuna.trial.TrialState.FAIL)
    text = render_report(empty, spec)
    assert text.count("skipped: no complete trial yet") == 2
    assert "skipped: no trial reported an epoch yet" in text
    assert "plotly-graph-div" not in text and "Trials (1)" in text


@pytest.mark.processes
def test_report_of_a_study_with_several_objectives(tmp_path: Path) -> None:
    from tests.tradeoff_study import run_tradeoff, tradeoff_doc

    path, _ = run_tradeoff(tmp_path, tradeoff_doc("mo"))
    out = tmp_path / "report.html"
    assert main(["report", str(path), "-o", str(out)]) == EXIT_OK
    text = out.read_text()
    for heading in (
        "Pareto front",
        "Optimization history: score",
        "Optimization history: cost",
        "Parameter importances for score",
        "Trials (4)",
    ):
        assert heading in text
    assert (
        "maximize score, minimize cost (the epoch best on score), subject to size &lt;= 500" in text
    )
    assert re.search(r"Pareto front \(feasible\): trials \d, \d", text)
    # The table: both objectives and whether each trial meets the constraints.
    assert "<th>score</th><th>cost</th><th>feasible</th>" in text
    assert text.count("<td>yes</td>") == 2 and text.count("<td>no</td>") == 2
    assert '<p class="note">skipped' not in text
