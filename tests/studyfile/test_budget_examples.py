"""The example studies of study.budget and seeding load (studies/budget.yaml,
studies/warm-start.yaml); the warm start reads the quickstart's study when it has run."""

from __future__ import annotations

from dvt_hpo.spec.model import BudgetSpec
from dvt_hpo.studyfile import load_spec
from tests.conftest import REPO_ROOT

STUDIES = REPO_ROOT / "studies"


def test_the_budget_example_loads() -> None:
    spec = load_spec(STUDIES / "budget.yaml")
    assert spec.study.budget == BudgetSpec(cpu_hours=1.0, epochs=40)
    assert spec.study.enqueue[1] == {"lr": 0.01}


def test_the_warm_start_example_names_the_quickstart() -> None:
    spec = load_spec(STUDIES / "warm-start.yaml")
    quickstart = load_spec(STUDIES / "quickstart.yaml")
    warm = spec.study.warm_start
    assert warm is not None and warm.copy_results and warm.top == 3
    assert (warm.study, warm.storage) == (quickstart.study.name, quickstart.study.storage)
