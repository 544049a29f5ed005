"""A study run as ``dvt-hpo run`` and :func:`dvt_hpo.run_study` start it: the study loop with
what the study file and the machine add to it.

:class:`~dvt_hpo.study.loop.StudyRunner` knows nothing of the views, MLflow or Slurm; it takes
observers, an observer factory and a launch gate. :func:`study_runner` passes it the ones a
run gets: the terminal progress, MLflow when ``tracking.mlflow`` is set and the Slurm ids
recorder inside a Slurm job (:func:`dvt_hpo.run.observers.study_observers`), and, inside a Slurm
job, the gate that stops starting trials when the job's time limit is near
(:mod:`dvt_hpo.cluster.time_limit`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dvt_hpo.cluster.time_limit import gate_for_environment
from dvt_hpo.run.observers import study_observers
from dvt_hpo.study.loop import StudyRunner

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.results.events import StudyObserver
    from dvt_hpo.spec.model import StudySpec


def study_runner(spec: StudySpec, **kwargs: Any) -> StudyRunner:
    """A :class:`StudyRunner` of ``spec`` with the study file's observers and, inside a Slurm
    job, its time-limit gate; ``kwargs`` are the runner's (a ``launch_gate`` given wins)."""
    if kwargs.get("launch_gate") is None:
        kwargs["launch_gate"] = gate_for_environment(spec)
    return StudyRunner(spec, observer_factory=study_observers, **kwargs)


def run_study(
    path: str | os.PathLike[str],
    overrides: tuple[str, ...] | list[str] = (),
    *,
    allow_space_change: bool = False,
    retry_failed: bool = False,
    out: Callable[[str], None] | None = None,
    observers: Sequence[StudyObserver] = (),
) -> optuna.Study:
    """Run (or resume) the study of a study.yaml file; returns the Optuna study.

    The same as ``dvt-hpo run PATH --set ...``, for notebooks and scripts.
    """
    from dvt_hpo.run.preflight import load_runnable

    spec = load_runnable(path, overrides)
    runner = study_runner(
        spec,
        allow_space_change=allow_space_change,
        retry_failed=retry_failed,
        out=out,
        observers=observers,
    )
    return runner.run()


__all__ = ["run_study", "study_runner"]
