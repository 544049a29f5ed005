"""The study loop's observers: which ones a study file asks for, and calling them so that none
of them can fail or stall the study.

:func:`study_observers` builds them once the study is open: terminal progress first (its
``out`` replaces the loop's own, so messages print above the live view), then MLflow when
``tracking.mlflow`` is set. :class:`Observers` wraps each call: an observer that raises costs
one warning line and the study goes on. The events are defined in :mod:`dvt_hpo.study.events`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from dvt_hpo.study.events import (
    BaseObserver,
    StudyEnded,
    StudyObserver,
    StudyStarted,
    TrialFinished,
    TrialReported,
    TrialStarted,
)
from dvt_hpo.views.progress import ProgressObserver

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.studyfile import StudySpec


class Observers:
    """Calls every observer; one that raises costs a warning line, never the study."""

    def __init__(self, observers: Sequence[StudyObserver], out: Callable[[str], None]) -> None:
        self._observers = list(observers)
        self._out = out

    def _call(self, method: str, event: Any) -> list[Any]:
        results = []
        for observer in self._observers:
            try:
                results.append(getattr(observer, method)(event))
            except Exception as exc:  # noqa: BLE001 - an observer never fails the study
                name = type(observer).__name__
                self._out(f"warning: observer {name}.{method} failed: {type(exc).__name__}: {exc}")
        return results

    def study_started(self, event: StudyStarted) -> None:
        self._call("study_started", event)

    def trial_started(self, event: TrialStarted) -> dict[str, Any]:
        attrs: dict[str, Any] = {}
        for returned in self._call("trial_started", event):
            if isinstance(returned, Mapping):
                attrs.update(returned)
        return attrs

    def trial_reported(self, event: TrialReported) -> None:
        self._call("trial_reported", event)

    def trial_finished(self, event: TrialFinished) -> None:
        self._call("trial_finished", event)

    def study_ended(self, event: StudyEnded) -> None:
        self._call("study_ended", event)
        for observer in self._observers:
            with contextlib.suppress(Exception):
                observer.close()


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


__all__ = ["Observers", "study_observers"]
