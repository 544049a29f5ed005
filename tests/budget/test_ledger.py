"""The ledger of ``study.n_trials``: it counts like a full scan by the rule of
:mod:`dvt_hpo.budget.trials`, and reads only new and unfinished trials (with marked failures and
their copies: tests/recovery/test_retries.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna

from dvt_hpo.budget.ledger import Budget, Ledger
from dvt_hpo.budget.trials import OVER_BUDGET_ATTR
from dvt_hpo.recovery import retries


def _sqlite_study(tmp_path: Path, name: str = "s") -> tuple[optuna.Study, Any]:
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.db'}")
    return optuna.create_study(storage=storage, study_name=name), storage


def test_the_ledger_counts_the_budget_like_a_full_scan(tmp_path: Path) -> None:
    study, storage = _sqlite_study(tmp_path)
    study_id = storage.get_study_id_from_name("s")
    done = study.ask()
    study.tell(done, 1.0)  # 0: COMPLETE
    failed = study.ask()
    study.tell(failed, state=optuna.trial.TrialState.FAIL)  # 1: FAIL, retried by 3
    over = study.ask()
    storage.set_trial_system_attr(over._trial_id, OVER_BUDGET_ATTR, True)
    study.tell(over, state=optuna.trial.TrialState.FAIL)  # 2: over budget, never counted
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.WAITING,
            system_attrs={"failed_trial": 1, "retry_history": [1]},
        )
    )  # 3: the copy of 1
    ledger = Ledger(study, storage, study_id)
    ledger.refresh()
    trials = study.get_trials(deepcopy=False)
    assert ledger.used() == len(retries.counted_numbers(trials)) == 2
    assert ledger.used(below=3) == 2  # 1 is not superseded by a copy numbered below 3
    assert ledger.used(below=2) == 2
    assert ledger.budget(lambda n: False) == Budget(used=2, waiting=1, foreign_running=0)
    running = study.ask()  # takes the WAITING copy (3)
    assert running.number == 3
    ledger.refresh()
    assert ledger.budget(lambda n: False) == Budget(2, 0, 1)
    assert ledger.budget(lambda n: n == 3) == Budget(2, 0, 0)


def test_the_ledger_reads_only_new_and_unfinished_trials(tmp_path: Path) -> None:
    study, storage = _sqlite_study(tmp_path)
    for i in range(30):
        study.tell(study.ask(), float(i))
    running = study.ask()
    reads: list[int] = []
    original = storage.get_trial

    def counting(trial_id: int) -> optuna.trial.FrozenTrial:
        reads.append(trial_id)
        return original(trial_id)

    storage.get_trial = counting  # type: ignore[method-assign]
    bulk: list[int] = []
    read_all = storage.get_all_trials

    def counting_all(study_id: int, **kwargs: Any) -> list[optuna.trial.FrozenTrial]:
        bulk.append(study_id)
        return read_all(study_id, **kwargs)

    storage.get_all_trials = counting_all  # type: ignore[method-assign]
    ledger = Ledger(study, storage, storage.get_study_id_from_name("s"))
    ledger.refresh()
    # The first read is two SQL queries for the whole study, not one trial at a time.
    assert (bulk, reads) == ([], [])
    assert ledger.used() == 31
    new = study.ask()
    study.tell(new, 1.0)
    reads.clear()
    ledger.refresh()
    # The one unfinished before, and the one new: not the 30 finished ones again.
    assert sorted(reads) == sorted([running._trial_id, new._trial_id])
    assert bulk == []
    assert ledger.used() == 32
    # A trial the caller has just read (the loop's start of its own) is not read again.
    started = study.ask()
    known = original(started._trial_id)
    reads.clear()
    ledger.refresh(known=known)
    assert reads == [running._trial_id]
    assert ledger.used() == 33
    assert ledger.budget(lambda n: n == started.number) == Budget(33, 0, 1)
    # A trial as its tell returned it is recorded as it is; one still running is read again.
    told = study.tell(running, 2.0)
    ledger.told(told)
    ledger.told(known)  # RUNNING: its state may still change
    reads.clear()
    ledger.refresh()
    assert reads == [started._trial_id]
    assert ledger.budget(lambda n: n == started.number) == Budget(33, 0, 0)  # told
    assert ledger.used(below=running.number + 1) == running.number + 1


def test_the_budget_says_when_no_trial_may_start_and_when_nothing_is_left() -> None:
    assert not Budget(used=5, waiting=0, foreign_running=0).all_asked(None)  # no n_trials
    assert not Budget(used=4, waiting=0, foreign_running=0).all_asked(5)
    assert Budget(used=5, waiting=0, foreign_running=1).all_asked(5)
    assert not Budget(used=5, waiting=1, foreign_running=0).all_asked(5)  # retries still run
    assert Budget(used=5, waiting=0, foreign_running=0).nothing_left(5)
    assert not Budget(used=5, waiting=0, foreign_running=1).nothing_left(5)
    assert not Budget(used=5, waiting=0, foreign_running=0, pending=1).nothing_left(5)
    assert not Budget(used=5, waiting=0, foreign_running=0).nothing_left(None)
