"""``study.budget``: its limits, read and checked with the rest of the study file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dvt_hpo.spec.model import BudgetSpec
from dvt_hpo.studyfile import load_spec
from tests.studyfile.helpers import BASE, bad_file_test, case, study_with


def test_budget_is_read_with_its_defaults(write: Callable[..., Path]) -> None:
    spec = load_spec(write(study_with("  budget: {gpu_hours: 200, epochs: 5000}")))
    assert spec.study.budget == BudgetSpec(gpu_hours=200.0, epochs=5000, strict=False)
    assert load_spec(write(BASE)).study.budget is None
    strict = load_spec(write(study_with("  budget: {hours: 1.5, strict: true}")))
    assert strict.study.budget == BudgetSpec(hours=1.5, strict=True)


def test_cpu_hours_on_a_cpu_study(write: Callable[..., Path]) -> None:
    text = study_with("  budget: {cpu_hours: 3}") + "trials: {devices: cpu}\n"
    assert load_spec(write(text)).study.budget == BudgetSpec(cpu_hours=3.0)


test_bad_budget = bad_file_test(
    [
        case("empty", study_with("  budget: {}"), 3, "study.budget", "at least one limit"),
        case("strict-only", study_with("  budget: {strict: true}"), 3, "study.budget", "gpu_hours"),
        case(
            "negative",
            study_with("  budget: {epochs: 0}"),
            3,
            "study.budget.epochs",
            ">= 1",
        ),
        case(
            "unknown",
            study_with("  budget: {gpu_hour: 3}"),
            3,
            "study.budget.gpu_hour",
            "gpu_hours",
        ),
        case(
            "gpu-hours-on-cpu",
            study_with("  budget: {gpu_hours: 3}") + "trials: {devices: cpu}\n",
            3,
            "study.budget.gpu_hours",
            "trials.devices is 'cpu'",
            "cpu_hours",
        ),
    ]
)
