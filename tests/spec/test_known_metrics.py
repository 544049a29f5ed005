"""The metrics a trainer reports, known before training (issue 18, item 1): the names of the
built-in trainer follow its config and its searched choices; other trainers are not checked."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dvt_hpo.exceptions import SpecError
from dvt_hpo.run.preflight import load_runnable
from dvt_hpo.spec.known_metrics import known_for

DIGITS = """\
study:
  name: s
objective: {metric: METRIC}
trainer:
  config:
    epochs: 1
    eval: {latency: {enabled: false}}
search_space:
  - {name: lr, path: optim.optim_args.lr, kind: float, low: 1.0e-4, high: 0.1, log: true}
"""
LATENCY_DIM = "  - {name: timed, path: eval.latency.enabled, kind: bool}\n"


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str], Path]:
    def _write(text: str) -> Path:
        path = tmp_path / "study.yaml"
        path.write_text(text)
        return path

    return _write


def test_latency_off_refuses_a_latency_objective_saying_how(write: Callable[[str], Path]) -> None:
    with pytest.raises(SpecError) as info:
        load_runnable(write(DIGITS.replace("METRIC", "latency_ms")))
    assert (info.value.line, info.value.field) == (3, "objective.metric"), str(info.value)
    assert "eval.latency.enabled: true" in info.value.message


def test_a_searched_choice_that_reports_it_is_enough(write: Callable[[str], Path]) -> None:
    spec = load_runnable(write(DIGITS.replace("METRIC", "latency_ms") + LATENCY_DIM))
    known = known_for(spec)
    assert known is not None and "latency_ms" in known.epoch


def test_returned_only_metric_is_a_constraint_not_an_objective(
    write: Callable[[str], Path],
) -> None:
    text = DIGITS.replace(
        "{metric: METRIC}", "{metric: loss, constraints: [{metric: epochs_run, min: 1}]}"
    )
    load_runnable(write(text))
    with pytest.raises(SpecError) as info:
        load_runnable(write(DIGITS.replace("METRIC", "epochs_run, direction: maximize")))
    assert "not reported per epoch" in info.value.message


def test_custom_entry_points_report_what_they_like(write: Callable[[str], Path]) -> None:
    text = (
        "study: {name: s}\nobjective: {metric: anything_at_all, direction: maximize}\n"
        "trainer: {entrypoint: 'tests.entrypoints.toy:run', config: {x: 0.5}}\n"
        "search_space:\n  - {name: x, path: x, kind: float, low: 0.0, high: 1.0}\n"
    )
    spec = load_runnable(write(text))
    assert known_for(spec) is None
