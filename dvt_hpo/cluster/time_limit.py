"""No trial started that the job's time limit would cut.

A worker inside a Slurm job asks, before it starts trials, whether one still fits: the time
left to the job (``squeue -o %L``) against how long this study's trials take (the median
duration of its completed trials) plus ``trials.stop_grace_s`` to record the last one. When
it does not fit, the worker starts no new trial, says so once, and ends when its running
trials do; the study's next ``submit`` carries on. A study with no completed trial yet has no
estimate, and a job without a time limit never stops for it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from dvt_hpo.cluster import slurm

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec.model import StudySpec

__all__ = ["TimeLimitGate", "gate_for_environment", "trial_fits"]

# squeue is asked again this often (the limit moves when an admin extends it); in between the
# time left is counted down locally, so hundreds of workers do not poll slurmctld per trial.
_REFRESH_LIMIT_S = 300.0
# The study's completed durations are read again at most this often.
_REFRESH_DURATIONS_S = 30.0


def _clock(seconds: float) -> str:
    minutes, s = divmod(int(round(seconds)), 60)
    h, m = divmod(minutes, 60)
    return f"{h}:{m:02d}:{s:02d}"


def trial_fits(
    left_s: float | None, durations_s: Sequence[float], margin_s: float, worker: str
) -> str | None:
    """None when a trial fits in ``left_s``; else the line that says why none starts."""
    if left_s is None or not durations_s:
        return None
    median_s = statistics.median(durations_s)
    if left_s >= median_s + margin_s:
        return None
    return (
        f"job {worker} has {_clock(left_s)} left, less than a trial takes here (median "
        f"{_clock(median_s)} of {len(durations_s)} completed trial(s), + {margin_s:g} s to "
        "stop and record one): no new trials from this worker; it ends with its running "
        "trials (`dvt-hpo submit` again to continue the study)"
    )


class TimeLimitGate:
    """``gate(study)``: None while a new trial fits before the job's time limit, else the
    reason (said by the study loop, which then stops launching)."""

    def __init__(
        self,
        job: slurm.SlurmJob,
        margin_s: float,
        *,
        time_left: Callable[[str], float | None] = slurm.time_left_s,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.job = job
        self.margin_s = margin_s
        self._time_left = time_left
        self._clock = clock
        self._end: float | None = None  # monotonic time of the limit
        self._limit_read_at: float | None = None
        self._durations: list[float] = []
        self._durations_read_at: float | None = None

    def _left_s(self) -> float | None:
        now = self._clock()
        if self._limit_read_at is None or now - self._limit_read_at >= _REFRESH_LIMIT_S:
            try:
                left = self._time_left(self.job.job_id)
            except slurm.SlurmError:
                left = None
            self._limit_read_at = now
            self._end = None if left is None else now + left
        return None if self._end is None else self._end - now

    def _completed_durations(self, study: optuna.Study) -> list[float]:
        from optuna.trial import TrialState

        now = self._clock()
        if self._durations_read_at is None or now - self._durations_read_at >= (
            _REFRESH_DURATIONS_S
        ):
            self._durations_read_at = now
            self._durations = [
                (t.datetime_complete - t.datetime_start).total_seconds()
                for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if t.datetime_start is not None and t.datetime_complete is not None
            ]
        return self._durations

    def __call__(self, study: optuna.Study) -> str | None:
        left = self._left_s()
        if left is None:
            return None
        return trial_fits(left, self._completed_durations(study), self.margin_s, self.job.name)


def gate_for_environment(spec: StudySpec) -> TimeLimitGate | None:
    """The gate of a worker running inside a Slurm job, None elsewhere."""
    job = slurm.SlurmJob.from_environ()
    if job is None or not slurm.available():
        return None
    return TimeLimitGate(job, spec.trials.stop_grace_s)
