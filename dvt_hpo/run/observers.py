"""The observers a study file asks for: the terminal progress first (its ``out`` replaces the
loop's own, so messages print above the live view), then MLflow when ``tracking.mlflow`` is set,
then the Slurm ids recorder inside a Slurm job. The loop receives :func:`study_observers` as its
:class:`~dvt_hpo.study.observers.ObserverFactory`; it calls it once the study is open.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, TYPE_CHECKING

from dvt_hpo.results.events import BaseObserver
from dvt_hpo.views.progress import ProgressObserver

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec.model import StudySpec


def study_observers(
    spec: StudySpec,
    study: optuna.Study | None,
    *,
    stream: IO[str] | None = None,
    live: bool | None = None,
    report_every_s: float | None = 30.0,
    progress: bool = True,
    out: Callable[[str], None] = print,
) -> tuple[ProgressObserver | None, list[BaseObserver]]:
    """``(progress, observers)``: ``observers`` holds ``progress`` first (unless ``progress``
    is false), then MLflow when ``tracking.mlflow`` is set (its ``tracking_uri`` already
    expanded by the spec), then the Slurm ids recorder inside a Slurm job. Raises ``DvtHpoError`` naming the extra to install when MLflow is
    asked for and missing."""
    view = ProgressObserver(stream, live=live, report_every_s=report_every_s) if progress else None
    observers: list[BaseObserver] = [view] if view is not None else []
    mlflow = spec.tracking.mlflow
    if mlflow is not None:
        from dvt_hpo.tracking.mlflow import MlflowObserver

        observers.append(
            MlflowObserver(
                mlflow.tracking_uri,
                mlflow.experiment or spec.study.name,
                run_name=getattr(mlflow, "run_name", None),
                tags=getattr(mlflow, "tags", None),
                study=study,
                warn=view.out if view is not None else out,
            )
        )
    from dvt_hpo.cluster.slurm import SlurmJob

    job = SlurmJob.from_environ()
    if job is not None:
        # A worker in a Slurm job: each trial records the job, array job and task.
        from dvt_hpo.cluster.observer import SlurmObserver

        observers.append(SlurmObserver(job))
    return view, observers


__all__ = ["study_observers"]
