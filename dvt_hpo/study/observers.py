"""The study loop's observers: calling them so that none of them can fail or stall the study,
and the shape of the factory that builds those a study file asks for.

:class:`Observers` wraps each call: an observer that raises costs one warning line and the study
goes on. Which observers a study file asks for (progress, MLflow, Slurm ids) is decided above
the loop, by :func:`dvt_hpo.run.observers.study_observers`, which the CLI and
:func:`dvt_hpo.run_study` hand the loop as its :class:`ObserverFactory`. The events are defined
in :mod:`dvt_hpo.results.events`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from dvt_hpo.results.events import (
    BaseObserver,
    StudyEnded,
    StudyObserver,
    StudyStarted,
    TrialFinished,
    TrialReported,
    TrialStarted,
)

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec.model import StudySpec


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


class LineView(Protocol):
    """A live view that prints the run's lines above itself (the terminal progress)."""

    def out(self, line: str) -> None: ...


class ObserverFactory(Protocol):
    """Builds the observers a study file asks for, once the study is open: ``(view, observers)``,
    ``view`` (or None) being the one whose ``out`` replaces the loop's own."""

    def __call__(
        self,
        spec: StudySpec,
        study: optuna.Study | None,
        *,
        progress: bool,
        out: Callable[[str], None],
    ) -> tuple[LineView | None, list[BaseObserver]]: ...


def for_run(
    factory: ObserverFactory | None,
    spec: StudySpec,
    study: optuna.Study,
    *,
    progress: bool,
    out: Callable[[str], None],
    extra: Sequence[StudyObserver] = (),
) -> tuple[Observers, LineView | None]:
    """A run's observers, once its study is open: those the study file asks for (``factory``:
    progress, MLflow), then the caller's (``extra``); and the live view, when there is one,
    whose ``out`` the run's lines go through from then on (the observers' warnings too)."""
    view, defaults = factory(spec, study, progress=progress, out=out) if factory else (None, [])
    if view is not None:
        out = view.out
    return Observers([*defaults, *extra], out), view


def ended_event(study: optuna.Study, spec: StudySpec, exit_code: int) -> StudyEnded:
    """What the observers hear when a run ends: the best trial or the front, or only the exit
    code when the study cannot be read (the database may be why the run ends)."""
    from dvt_hpo.results.front import study_ended

    try:
        return study_ended(study.get_trials(deepcopy=False), spec.objective.directions, exit_code)
    except Exception:  # noqa: BLE001 - the observers still hear the end
        return StudyEnded(0, None, None, None, exit_code)


def started_event(spec: StudySpec, where: str, n_done: int) -> StudyStarted:
    """What the observers hear when a run starts (``where``: the storage, secrets out)."""
    from dvt_hpo.study.setup import study_settings

    settings = study_settings(spec)
    return StudyStarted(
        study_name=spec.study.name,
        storage=where,
        direction=",".join(spec.objective.directions),
        metric=",".join(spec.objective.names),
        n_trials=spec.study.n_trials,
        n_done=n_done,
        study_file=str(spec.path.resolve()),
        space=settings["space"],
        settings={k: v for k, v in settings.items() if k != "space"},
    )


__all__ = ["LineView", "ObserverFactory", "Observers", "ended_event", "for_run", "started_event"]
