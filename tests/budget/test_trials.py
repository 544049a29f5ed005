"""One budget rule for ``run`` and ``status`` (issue 18, item 4): the run's ledger, its
summary and ``status`` count the same trials, on an RDB storage and on a journal file."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

from dvt_hpo.budget.ledger import Ledger
from dvt_hpo.budget.trials import OVER_BUDGET_ATTR, Attempt, uncounted, uncounted_attempts
from dvt_hpo.recovery import retries
from dvt_hpo.store.opening import StudyAt
from dvt_hpo.store.storage import retry_callback
from dvt_hpo.studyfile import load_spec
from dvt_hpo.views.status import format_status, read_status
from tests.conftest import toy_study


def test_the_rule() -> None:
    attempts = [
        Attempt(0, "FAIL"),
        Attempt(1, "FAIL"),
        Attempt(2, "FAIL", over_budget=True),
        Attempt(3, "COMPLETE", retries=(0,)),
        Attempt(4, "RUNNING", retries=(1,)),
        Attempt(5, "FAIL"),
    ]
    assert uncounted_attempts(attempts) == {
        0: "failed and retried",
        1: "failed and retried",
        2: "over budget",
    }
    # As the budget stood before trial 4 existed, trial 1 still counted.
    assert uncounted([0, 1, 5], [2], {0: 3, 1: 4}, below=4) == {
        0: "failed and retried",
        2: "over budget",
    }


@pytest.mark.parametrize("storage", ["sqlite:///b.db", "journal:///b.log"])
def test_status_counts_what_run_counts(tmp_path: Path, storage: str) -> None:
    path = tmp_path / "study.yaml"
    doc = toy_study("budget", study={"n_trials": 3, "storage": storage})
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    spec = load_spec(path)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    opened = StudyAt(spec.study.storage, "budget").create_or_load(["minimize"])
    raw, study = opened.storage, opened.study
    space = {"x": optuna.distributions.FloatDistribution(0, 1)}
    failed = [study.ask(space) for _ in range(2)]
    for trial in failed:  # two failures, each retried by a copy that completes
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        retry_callback(1)(study, study.get_trials(deepcopy=False)[trial.number])
    for _ in failed:
        study.tell(study.ask(), 0.5)  # the WAITING copies
    # A racing worker asked past the budget and closed its trial at once.
    late = study.ask()
    raw.set_trial_system_attr(late._trial_id, OVER_BUDGET_ATTR, True)
    study.tell(late, state=optuna.trial.TrialState.FAIL)
    trials = study.get_trials(deepcopy=False)
    assert [t.state.name for t in trials] == ["FAIL", "FAIL", "COMPLETE", "COMPLETE", "FAIL"]

    ledger = Ledger(study, raw, raw.get_study_id_from_name("budget"))
    ledger.refresh()
    opened = StudyAt.of(spec).load()
    status = read_status(opened.storage, opened.study_id, spec)

    assert ledger.used() == len(retries.counted_numbers(trials)) == status.finished == 2
    text = format_status(status)
    assert "2/3 trials finished" in text, text
    assert "2 failed and retried (not counted)" in text and "1 over budget (not counted)" in text
