"""The observers a study file asks for, built in one place for the study loop.

The loop calls :func:`study_observers` once it has opened the study and passes every event to
each observer in order (wrapping each call, see ``dvt_hpo.events``); the progress observer
comes first, and its ``out`` replaces the loop's own ``out`` so that messages print above the
live view.
"""

from __future__ import annotations

from typing import IO, TYPE_CHECKING

from dvt_hpo.events import BaseObserver
from dvt_hpo.progress import ProgressObserver

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec import StudySpec


def study_observers(
    spec: StudySpec,
    study: optuna.Study | None,
    *,
    stream: IO[str] | None = None,
    live: bool | None = None,
    report_every_s: float | None = 30.0,
) -> tuple[ProgressObserver, list[BaseObserver]]:
    """``(progress, observers)``: ``observers`` holds ``progress`` first, then MLflow when
    ``tracking.mlflow`` is set (its ``tracking_uri`` already expanded by the spec). Raises
    ``DvtHpoError`` naming the extra to install when MLflow is asked for and missing."""
    progress = ProgressObserver(stream, live=live, report_every_s=report_every_s)
    observers: list[BaseObserver] = [progress]
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
                warn=progress.out,
            )
        )
    return progress, observers


__all__ = ["study_observers"]
