"""``study.budget``: compute spent, read from the storage, shared by workers and resumes."""

from __future__ import annotations

import contextlib
import datetime
import json
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest

from dvt_hpo.budget import compute as compute_budget
from dvt_hpo.budget.compute import UNITS_ATTR, BudgetDecision, ComputeLedger, Spent
from dvt_hpo.budget.trials import PRIOR_ATTR
from dvt_hpo.devices.slots import Slot
from dvt_hpo.spec.model import BudgetSpec
from tests.conftest import toy_study
from tests.orchestrator import Orchestrator, load_trials

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_the_first_spent_limit_is_named() -> None:
    budget = BudgetSpec(gpu_hours=2.0, epochs=100)
    assert compute_budget.exhausted(budget, Spent(gpu_hours=1.5, epochs=99)) is None
    why = compute_budget.exhausted(budget, Spent(gpu_hours=1.5, epochs=100))
    assert why == "study.budget.epochs=100 spent (100 epochs)"
    assert compute_budget.budget_text(budget, Spent(gpu_hours=1.5, epochs=7)) == (
        "gpu_hours 1.5/2, epochs 7/100"
    )


def _watch(budget: BudgetSpec, hours_ago: float) -> compute_budget.BudgetWatch:
    """A watch on an empty study that started ``hours_ago``: only ``hours`` can be spent."""
    storage = optuna.storages.InMemoryStorage()
    study_id = storage.get_study_id_from_name(optuna.create_study(storage=storage).study_name)
    return compute_budget.BudgetWatch(
        budget,
        storage,
        study_id,
        time.time() - hours_ago * 3600,
        study_lock=contextlib.nullcontext(),
        db=lambda call, what: call(),
    )


def test_the_budget_decides_launches_and_strict_stops() -> None:
    assert _watch(BudgetSpec(hours=1.0), 0.5).decide({3}) == BudgetDecision(None)
    why = "study.budget.hours=1 spent (2 hours)"
    assert _watch(BudgetSpec(hours=1.0), 2.0).decide(()) == BudgetDecision(
        f"{why}: no new trials", why
    )
    # Not strict: the running trials finish.
    assert _watch(BudgetSpec(hours=1.0), 2.0).decide({3, 4}) == BudgetDecision(
        f"{why}: no new trials; waiting for 2 running trial(s)", why
    )
    # Strict: every running trial is stopped.
    assert _watch(BudgetSpec(hours=1.0, strict=True), 2.0).decide({3, 4}) == BudgetDecision(
        f"{why}: no new trials; stopping 2 running trial(s) (strict)", why, frozenset({3, 4})
    )
    # A strict budget with nothing running stops nothing.
    assert _watch(BudgetSpec(hours=1.0, strict=True), 2.0).decide(()).stop == frozenset()


def test_a_trial_counts_its_gpus_or_its_threads() -> None:
    assert compute_budget.slot_units(Slot(0, "0,1", None), 1, {}) == {"gpus": 2.0, "cpu_threads": 0}
    # A quarter of a GPU (trials.per_gpu: 4) is a quarter of its hours.
    assert compute_budget.slot_units(Slot(0, "3", None, per_gpu=4), 1, {})["gpus"] == 0.25
    cpu = compute_budget.slot_units(Slot(0, "", 4), 2, {})
    assert cpu == {"gpus": 0.0, "cpu_threads": 8}  # torchrun on the CPU: 2 processes x 4
    assert (
        compute_budget.slot_units(Slot(0, "", 4), 1, {"OMP_NUM_THREADS": "3"})["cpu_threads"] == 3
    )


def _trial(
    start: datetime.datetime, seconds: float | None, units: dict, epochs: int, **system: object
) -> optuna.trial.FrozenTrial:
    state = optuna.trial.TrialState.RUNNING if seconds is None else optuna.trial.TrialState.COMPLETE
    return optuna.trial.FrozenTrial(
        number=0,
        state=state,
        value=None if seconds is None else 1.0,
        datetime_start=start,
        datetime_complete=None if seconds is None else start + datetime.timedelta(seconds=seconds),
        params={},
        distributions={},
        user_attrs={},
        system_attrs={UNITS_ATTR: units, **system},
        intermediate_values={i: 0.5 for i in range(epochs)},
        trial_id=0,
    )


def test_the_ledger_sums_finished_and_running_trials(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
    storage, sid = study._storage, study._study_id
    t0 = datetime.datetime(2026, 1, 1, 12, 0, 0)
    study.add_trial(_trial(t0, 3600, {"gpus": 2, "cpu_threads": 0}, 5))
    study.add_trial(_trial(t0, 1800, {"gpus": 0, "cpu_threads": 4}, 3))
    # Copied from an earlier study: prior knowledge, spent by another study.
    study.add_trial(_trial(t0, 3600, {"gpus": 8, "cpu_threads": 0}, 50, **{PRIOR_ATTR: "a#0"}))
    ledger = ComputeLedger(storage, sid)
    started = t0.timestamp()
    spent = ledger.spent(started, now=started + 7200)
    assert spent == Spent(gpu_hours=2.0, cpu_hours=2.0, epochs=8, hours=2.0)
    # A running trial counts up to now, and new trials are found incrementally.
    running = storage.create_new_trial(sid, template_trial=_trial(t0, None, {"gpus": 1}, 2))
    assert storage.get_trial(running).state.name == "RUNNING"
    later = ledger.spent(started, now=started + 3600)
    assert (later.gpu_hours, later.epochs) == (3.0, 10)


def test_a_resumed_copy_counts_only_the_epochs_it_trained() -> None:
    """Its chain's earlier reports, stored on it too (``resumed_epochs``), were counted on the
    attempt that trained them."""
    t0 = datetime.datetime(2026, 1, 1, 12, 0, 0)
    copy = _trial(t0, 60, {"gpus": 1}, 5)
    assert compute_budget.cost_of(copy).epochs == 5
    copy.user_attrs.update({"resumed_epochs": 3, "epochs_reported": 5})
    assert compute_budget.cost_of(copy).epochs == 2
    copy.user_attrs["resumed_epochs"] = 5  # resumed past its last epoch: trained none
    assert compute_budget.cost_of(copy).epochs == 0


def test_the_start_is_marked_once(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
    storage, sid = study._storage, study._study_id
    first = compute_budget.mark_started(storage, sid, contextlib.nullcontext)
    assert compute_budget.mark_started(storage, sid, contextlib.nullcontext) == first


def _counts(study: Path) -> tuple[int, int, list[str]]:
    trials = load_trials(study)
    epochs = sum(len(t.intermediate_values) for t in trials)
    return len(trials), epochs, [str(t.user_attrs.get("status")) for t in trials]


# Each trial reports 3 epochs, 0.3 s apart, so the workers' trials overlap.
def _budget_study(name: str, url: str, **budget: object) -> dict:
    doc = toy_study(name, study={"n_trials": 50, "storage": url, "budget": budget})
    doc["trainer"]["config"]["actions"] = [{"do": "curve", "sleep_s": 0.3}]
    return doc


@pytest.mark.processes
def test_workers_share_an_epochs_budget(
    write_study: Callable[..., Path], unique_name: str, storage_url: str
) -> None:
    study = write_study(_budget_study(unique_name, storage_url, epochs=10))
    code, out = Orchestrator(study, "--workers", "2").finish()
    assert code == 0, out
    n, epochs, _ = _counts(study)
    # Spent at the 10th report; then at most the 2 running trials (one per worker) finish:
    # at most 9 + 2 x 3 epochs. Counted per worker, each would have run 4 trials (8).
    assert 10 <= epochs <= 15 and n <= 5, out
    assert "study.budget.epochs=10 spent" in out, out
    # A resume starts nothing: the budget is the study's.
    code, again = Orchestrator(study).finish()
    assert code == 0 and "no new trials" in again and _counts(study)[0] == n, again


@pytest.mark.processes
def test_separate_workers_stop_strictly(
    write_study: Callable[..., Path], unique_name: str, storage_url: str
) -> None:
    study = write_study(_budget_study(unique_name, storage_url, epochs=10, strict=True))
    first, second = Orchestrator(study), Orchestrator(study)
    (code1, out1), (code2, out2) = first.finish(), second.finish()
    assert (code1, code2) == (0, 0), out1 + out2
    n, epochs, status = _counts(study)
    # Each report is counted before the check: at most one report per worker past it.
    assert 10 <= epochs <= 11, out1 + out2
    assert "over-budget" in status, status


@pytest.mark.processes
def test_status_the_report_and_mlflow_show_spent_over_total(
    write_study: Callable[..., Path], tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    from dvt_hpo.studyfile import load_spec
    from dvt_hpo.views.status import show_status
    from tests.conftest import run_keeping_failures

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    doc = toy_study(
        "shown",
        study={"n_trials": 10, "budget": {"epochs": 5}},
        tracking={"mlflow": {"tracking_uri": uri, "experiment": "budget"}},
    )
    spec = load_spec(write_study(doc))
    lines: list[str] = []
    study = run_keeping_failures(spec, lines)
    assert len(study.trials) == 2, lines  # 3 epochs each: spent during the second
    trial_lines = [x for x in lines if x.startswith("trial ") and "COMPLETE" in x]
    assert [x.rpartition(" | ")[2] for x in trial_lines] == [
        "budget epochs 3/5",
        "budget epochs 6/5",
    ]
    assert "study.budget.epochs=5 spent (6 epochs): no new trials" in lines, lines
    assert "budget: epochs 6/5 (spent: no new trials)" in show_status(spec)
    shown = json.loads(show_status(spec, as_json=True))
    assert shown["budget"] == {"limits": {"epochs": {"spent": 6, "total": 5.0}}, "spent": True}
    assert shown["budget_text"] == "epochs 6/5 (spent: no new trials)"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("budget")
    (parent,) = [
        r
        for r in client.search_runs([experiment.experiment_id])
        if "mlflow.parentRunId" not in r.data.tags
    ]
    history = client.get_metric_history(parent.info.run_id, "budget_spent.epochs")
    assert sorted((m.step, m.value) for m in history) == [(0, 3.0), (1, 6.0)]
    assert parent.data.metrics["budget_total.epochs"] == 5.0
    pytest.importorskip("plotly")
    from dvt_hpo.views.html_report import render_report

    assert "budget: epochs 6/5 (spent: no new trials)" in render_report(study, spec)


@pytest.mark.processes
def test_a_strict_hours_budget_stops_a_trial_that_never_reports(
    write_study: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dvt_hpo.studyfile import load_spec
    from tests.conftest import run_keeping_failures

    # 30 s of wall time, counted from the study's start: a wide margin for the first trial to
    # start on a loaded machine (2 s were spent before it started under load, which a 2 s
    # budget did not survive). Once the trial runs (its file written: an event, not a delay),
    # the budget's clock moves 30 s on, so the test does not wait them out; the trial sleeps
    # 300 s without a report, and the loop's wake stops it.
    started = tmp_path / "trial-started"
    real_time = time.time

    class Clock:
        """The budget module's ``time``: real, plus the budget once the trial has started."""

        def __getattr__(self, name: str) -> object:
            return getattr(time, name)

        def time(self) -> float:
            return real_time() + (30.0 if started.exists() else 0.0)

    monkeypatch.setattr(compute_budget, "time", Clock())
    doc = toy_study("hours", study={"n_trials": 5, "budget": {"hours": 30 / 3600, "strict": True}})
    doc["trainer"]["config"]["actions"] = [
        {"do": "write", "path": str(started), "text": "running"},
        {"do": "sleep", "seconds": 300},
    ]
    lines: list[str] = []
    study = run_keeping_failures(load_spec(write_study(doc)), lines)
    (trial,) = study.trials
    assert trial.state.name == "FAIL" and trial.user_attrs["status"] == "over-budget", lines
    assert trial.user_attrs["duration_s"] < 60, lines
    assert "study.budget.hours" in trial.user_attrs["reason"], trial.user_attrs["reason"]
    # The limit's name, as docs/budgets.md says (the line is in the reason).
    assert trial.user_attrs["over_budget"] == "hours"
    # Not retried: an over-budget stop is the budget's decision, not a crash.
    assert not any(t.state.name == "WAITING" for t in study.trials)
