"""Each trial records where it ran: the Slurm job, array job and task of its worker.

The host is recorded by the trial itself (user attr ``host``); this observer adds
``slurm_job_id``, ``slurm_array_job_id``, ``slurm_array_task_id`` and ``slurm_worker``
(``123_4``), which ``dvt-hpo status`` matches to the study's workers.
"""

from __future__ import annotations

from typing import Any

from dvt_hpo.cluster.slurm import SlurmJob
from dvt_hpo.results.events import BaseObserver, TrialStarted

__all__ = ["SlurmObserver"]


class SlurmObserver(BaseObserver):
    def __init__(self, job: SlurmJob) -> None:
        self.job = job

    def trial_started(self, event: TrialStarted) -> dict[str, Any]:
        return dict(self.job.attrs())
