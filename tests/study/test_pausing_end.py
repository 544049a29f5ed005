"""When the study is over, every paused state goes (``PauseKeeper.study_over``), whichever end
it is: ``study.n_trials`` used, ``study.budget`` spent, the plateau reached; and not while the
study goes on or a trial of another worker still runs or waits. The end through ``dvt-hpo
run`` is tests/study/test_pausing.py's; ``cancel --discard-paused`` is tests/cluster/test_jobs.py's.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest

from dvt_hpo.budget.ledger import Budget
from dvt_hpo.recovery.pause import paused_states
from dvt_hpo.study.pausing import PauseKeeper
from tests.recovery.test_pause import complete, paused_trial, spec_of

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


class Spent:
    """``study.budget``'s watch, as the keeper asks it: why it is spent, or None."""

    def __init__(self, why: str | None) -> None:
        self.why = why

    def exhausted(self) -> str | None:
        return self.why


def keeper(
    tmp_path: Path, *, n_trials: int, spent: str | None = None
) -> tuple[Any, Any, list[str]]:
    spec = spec_of(tmp_path)
    spec = dataclasses.replace(spec, study=dataclasses.replace(spec.study, n_trials=n_trials))
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.db'}")
    study = optuna.create_study(storage=storage, study_name="paused", direction="maximize")
    handle = SimpleNamespace(spec=spec, study=study, lock=threading.RLock(), budget=Spent(spent))
    lines: list[str] = []
    return PauseKeeper(handle, threading.RLock, lines.append), study, lines  # type: ignore[arg-type]


def kept(keeper_: PauseKeeper, study: optuna.Study) -> list[int]:
    return [p.number for p in paused_states(keeper_.handle.spec, study.get_trials())]


@pytest.mark.parametrize(
    ("end", "n_trials", "spent", "plateau"),
    [
        ("n_trials used", 2, None, False),
        ("budget spent", 100, "study.budget.epochs=5 spent", False),
        ("plateau reached", 100, None, True),
    ],
)
def test_every_paused_state_goes_at_each_kind_of_end(
    tmp_path: Path, end: str, n_trials: int, spent: str | None, plateau: bool
) -> None:
    keeper_, study, lines = keeper(tmp_path, n_trials=n_trials, spent=spent)
    complete(study, 0.9, {1: 0.9})
    paused = paused_trial(study, keeper_.handle.spec, 0.5, {1: 0.8})
    assert kept(keeper_, study) == [paused]
    watch = SimpleNamespace(reached=plateau)
    keeper_.study_over(Budget(used=2, waiting=0, foreign_running=0), plateau=watch)  # type: ignore[arg-type]
    assert kept(keeper_, study) == [], end
    assert lines == ["the study is over: deleted the paused state of 1 trial(s)"]


def test_states_stay_while_the_study_goes_on_or_another_worker_runs(tmp_path: Path) -> None:
    keeper_, study, lines = keeper(tmp_path, n_trials=2)
    complete(study, 0.9, {1: 0.9})
    paused = paused_trial(study, keeper_.handle.spec, 0.5, {1: 0.8})
    not_over = Budget(used=1, waiting=0, foreign_running=0)
    keeper_.study_over(not_over, plateau=None)
    used_up = Budget(used=2, waiting=1, foreign_running=0)  # a copy still waits to run
    keeper_.study_over(used_up, plateau=None)
    running = study.ask()  # another worker's trial: the last worker to end deletes them
    keeper_.study_over(Budget(used=2, waiting=0, foreign_running=1), plateau=None)
    assert kept(keeper_, study) == [paused] and lines == []
    study.tell(running, 0.1)
    keeper_.study_over(Budget(used=2, waiting=0, foreign_running=0), plateau=None)
    assert kept(keeper_, study) == []
