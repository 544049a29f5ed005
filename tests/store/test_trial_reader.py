"""The incremental trial reader both ledgers use: the first read takes every trial (the dense
prefix), later reads only the unfinished and the new ones."""

from __future__ import annotations

from pathlib import Path

import optuna

from dvt_hpo.store.trial_reader import TrialReader


def test_finished_trials_are_read_once_unfinished_and_new_ones_again(tmp_path: Path) -> None:
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.db'}")
    study = optuna.create_study(storage=storage, study_name="s")
    study_id = storage.get_study_id_from_name("s")
    study.tell(study.ask(), 1.0)
    running = study.ask()
    reads: list[int] = []

    def one(number: int, trial_id: int) -> optuna.trial.FrozenTrial:
        reads.append(number)
        return storage.get_trial(trial_id)

    reader: TrialReader[optuna.trial.FrozenTrial] = TrialReader(
        storage,
        study_id,
        first=lambda: (
            (t.number, t._trial_id, t) for t in storage.get_all_trials(study_id, deepcopy=False)
        ),
        one=one,
        finished=lambda t: t.state.is_finished(),
    )
    assert [n for n, _ in reader.read()] == [0, 1] and reads == []
    assert reader.count == 2 and reader.unfinished == {1}
    study.tell(running, 2.0)
    new = study.ask()
    assert [n for n, _ in reader.read()] == [1, 2] and reads == [1, 2]
    assert reader.unfinished == {new.number}
    reads.clear()
    study.tell(new, 3.0)
    assert [n for n, t in reader.read()] == [2] and reader.unfinished == frozenset()
    assert reader.read() == [] and reads == [2]


def test_the_first_read_keeps_only_the_dense_prefix(tmp_path: Path) -> None:
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.db'}")
    study = optuna.create_study(storage=storage, study_name="s")
    study_id = storage.get_study_id_from_name("s")
    for _ in range(3):
        study.tell(study.ask(), 1.0)
    ids = [t._trial_id for t in study.trials]
    reader: TrialReader[str] = TrialReader(
        storage,
        study_id,
        first=lambda: [(0, ids[0], "COMPLETE"), (2, ids[2], "COMPLETE")],  # 1 missing
        one=lambda number, trial_id: storage.get_trial(trial_id).state.name,
        finished=lambda state: state == "COMPLETE",
    )
    assert reader.read() == [(0, "COMPLETE"), (1, "COMPLETE"), (2, "COMPLETE")]
