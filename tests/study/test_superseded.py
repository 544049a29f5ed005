"""A running trial another worker finished meanwhile (its sweep failed it as stale and queued its
retry, docs/recovery.md): its worker stops it at its next report and records nothing of it, so
the copy continues the chain from the state the trial saved last, its resume folder intact.

The sweep is done from the test process, as another worker's would be
(``retries.fail_attempt``); the worker's own sweep enqueues the copy, which the same worker
then runs. Real worker, real trial processes, real SQLite.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from dvt_hpo.budget.trials import RETRY_ATTR
from dvt_hpo.optuna_api.private import trial_id_of
from dvt_hpo.recovery import retries
from tests.recovery.test_resume import (
    chain_folder,
    counter_doc,
    env_with,
    expected_curve,
    load,
    starts,
    wait_for,
    write_doc,
)

pytestmark = pytest.mark.processes

EPOCHS = 6


def test_a_trial_failed_by_another_worker_stops_and_leaves_its_chain_to_the_copy(
    tmp_path: Path, unique_name: str
) -> None:
    epoch_log = tmp_path / "epochs.txt"
    doc = counter_doc(unique_name, tmp_path, epochs=EPOCHS, sleep_s=1.0, epoch_log=str(epoch_log))
    doc["study"].update(enqueue=[{"x": 0.3}])
    path = write_doc(tmp_path, doc)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dvt_hpo", "run", str(path)],
        cwd=tmp_path,
        env=env_with(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def reported_step_1() -> bool:
        try:
            trials = load(path, unique_name).get_trials(deepcopy=False)
        except KeyError:  # the worker has not created the study yet
            return False
        return bool(trials) and 1 in trials[0].intermediate_values

    wait_for(reported_step_1, proc, timeout_s=120)
    study = load(path, unique_name)
    storage = study._storage
    first = study.get_trials(deepcopy=False)[0]
    # What another worker's sweep does to a trial whose heartbeat it judged stale.
    assert retries.fail_attempt(
        study, storage, trial_id_of(first), retry=True, max_retries=1, enqueue=False
    )
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, out + err

    trials = load(path, unique_name).trials
    assert len(trials) == 2, [(t.number, t.state.name) for t in trials]
    failed, copy = trials
    # The other worker's record stands: FAIL for a retry, nothing written over it here.
    assert failed.state == optuna.trial.TrialState.FAIL
    assert failed.system_attrs.get(RETRY_ATTR) == 0
    assert "status" not in failed.user_attrs, failed.user_attrs
    last = max(failed.intermediate_values)
    # Stopped at the first report after the fail: it trained that one epoch more, no other.
    lines = [line.split() for line in epoch_log.read_text().splitlines()]
    trained = [int(epoch) for trial, epoch in lines if trial == "0"]
    assert max(trained) == last + 1 < EPOCHS - 1, trained
    assert "trial   0 STOPPED" in out and "another worker failed it as stale" in out, out
    # The copy resumed from the state the trial saved after its last stored report: the
    # resume folder was left to it. The epoch the stopped trial trained after the fail was
    # never saved, so the copy trains it again (its one redone epoch).
    assert copy.state == optuna.trial.TrialState.COMPLETE, copy.user_attrs
    assert retries.retry_history(copy) == [0]
    assert (1, last + 1) in starts(tmp_path)
    assert (copy.user_attrs["resumed_epochs"], copy.user_attrs["redone_epochs"]) == (last + 1, 1)
    assert copy.intermediate_values == expected_curve(0.3, EPOCHS)
    assert copy.value == expected_curve(0.3, EPOCHS)[EPOCHS - 1]
    assert not chain_folder(path, unique_name).exists()
