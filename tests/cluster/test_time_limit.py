"""No trial started that the job's time limit would cut (dvt_hpo.cluster.time_limit)."""

from __future__ import annotations

from datetime import datetime, timedelta

import optuna

from dvt_hpo.cluster.slurm import SlurmJob
from dvt_hpo.cluster.time_limit import TimeLimitGate, trial_fits

JOB = SlurmJob(job_id="41", array_job_id="40", array_task_id="1", host="node7")


def test_a_trial_fits_while_the_median_duration_and_margin_are_left() -> None:
    assert trial_fits(None, [60.0], 10, "40_1") is None  # no time limit
    assert trial_fits(30.0, [], 10, "40_1") is None  # nothing known of the trials
    assert trial_fits(71.0, [60.0, 10.0, 70.0], 10, "40_1") is None  # median 60 + 10
    refused = trial_fits(69.0, [60.0, 10.0, 70.0], 10, "40_1")
    assert refused is not None
    assert refused.startswith("job 40_1 has 0:01:09 left, less than a trial takes here")
    assert "median 0:01:00 of 3 completed trial(s), + 10 s" in refused
    assert "`dvt-hpo submit` again" in refused


def _study_with_durations(*seconds: float) -> optuna.Study:
    study = optuna.create_study()
    start = datetime(2026, 1, 1, 12, 0, 0)
    for i, s in enumerate(seconds):
        study.add_trial(
            optuna.trial.FrozenTrial(
                number=i,
                state=optuna.trial.TrialState.COMPLETE,
                value=float(i),
                datetime_start=start,
                datetime_complete=start + timedelta(seconds=s),
                params={},
                distributions={},
                user_attrs={},
                system_attrs={},
                intermediate_values={},
                trial_id=i,
            )
        )
    return study


def test_the_gate_counts_down_locally_and_asks_slurm_again_after_a_while() -> None:
    now = [1000.0]
    asked: list[float] = []
    end = 1000.0 + 600.0  # the job's time limit, 600 s away

    def time_left(job_id: str) -> float | None:
        assert job_id == "41"  # the task's own job id
        asked.append(now[0])
        return end - now[0]

    gate = TimeLimitGate(JOB, 5.0, time_left=time_left, clock=lambda: now[0])
    assert gate(optuna.create_study()) is None  # no completed trial: no estimate
    study = _study_with_durations(50.0, 60.0, 300.0)  # median 60 s
    now[0] = 1100.0  # 500 s left: counted down without asking Slurm
    assert gate(study) is None
    now[0] = end - 64.0  # 64 s left < 60 + 5, read again after the refresh period
    refused = gate(study)
    assert refused is not None and refused.startswith("job 40_1 has 0:01:04 left")
    assert "median 0:01:00 of 3 completed trial(s), + 5 s" in refused
    assert asked == [1000.0, end - 64.0]


def test_a_job_without_a_time_limit_never_stops_launching() -> None:
    gate = TimeLimitGate(JOB, 5.0, time_left=lambda job_id: None, clock=lambda: 0.0)
    study = optuna.create_study()
    study.add_trial(optuna.trial.create_trial(value=1.0, state=optuna.trial.TrialState.COMPLETE))
    assert gate(study) is None
