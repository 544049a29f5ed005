"""What the study loop tells its observers: terminal progress, MLflow, anything else.

The study loop calls every observer's methods in the orchestrator process. Observers must be
fast (queue slow work, such as network calls, on a thread of their own) and must never raise:
a failing observer is a warning, never a failed study (the loop wraps each call and logs a
single line when one raises). Stdlib only; no torch, no MLflow here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class StudyStarted:
    study_name: str
    storage: str  # redacted URL, safe to show
    direction: str  # "minimize" | "maximize" (a comma-joined list for several objectives)
    metric: str  # the objective metric (comma-joined for several)
    n_trials: int | None  # the study's total budget; None: no limit
    n_done: int  # trials already finished (COMPLETE + PRUNED) when this run starts
    study_file: str  # absolute path of study.yaml
    space: dict[str, Any]  # the resolved search space (JSON-safe)
    settings: dict[str, Any] = field(default_factory=dict)  # sampler, pruner, objective, ...


@dataclass(frozen=True)
class TrialStarted:
    number: int
    trial_id: int  # Optuna's storage id (for set_trial_user_attr on the storage)
    params: dict[str, Any]
    retry_of: int | None  # the trial number this trial retries, if any
    start_time: float  # time.time()


@dataclass(frozen=True)
class TrialReported:
    number: int
    step: int
    metrics: dict[str, float]
    elapsed_s: float


@dataclass(frozen=True)
class TrialFinished:
    number: int
    trial_id: int
    state: str  # "COMPLETE" | "PRUNED" | "FAIL"
    value: float | None  # the objective (None unless COMPLETE; for PRUNED the last reported)
    params: dict[str, Any]
    reason: str | None  # why it failed or was pruned
    duration_s: float
    user_attrs: dict[str, Any]  # batch size, probes, epochs, host, ...
    values: tuple[float, ...] = ()  # every objective's (COMPLETE), in the study's order
    feasible: bool | None = None  # None: the study has no constraints, or nothing to judge


@dataclass(frozen=True)
class StudyEnded:
    n_done: int  # COMPLETE + PRUNED in the study now
    best_value: float | None  # the best FEASIBLE trial's (one objective)
    best_params: dict[str, Any] | None
    best_number: int | None
    exit_code: int
    # Several objectives: the feasible Pareto front's trial numbers (best_* are then None).
    front: tuple[int, ...] = ()


class StudyObserver(Protocol):
    """Every method is optional in practice: subclass :class:`BaseObserver`."""

    def study_started(self, event: StudyStarted) -> None: ...
    def trial_started(self, event: TrialStarted) -> dict[str, Any] | None: ...
    def trial_reported(self, event: TrialReported) -> None: ...
    def trial_finished(self, event: TrialFinished) -> None: ...
    def study_ended(self, event: StudyEnded) -> None: ...
    def close(self) -> None: ...


class BaseObserver:
    """No-op observer. ``trial_started`` may return user attrs to store on the trial (the
    MLflow run id, for instance); the loop sets them before the trial process starts."""

    def study_started(self, event: StudyStarted) -> None:
        pass

    def trial_started(self, event: TrialStarted) -> dict[str, Any] | None:
        return None

    def trial_reported(self, event: TrialReported) -> None:
        pass

    def trial_finished(self, event: TrialFinished) -> None:
        pass

    def study_ended(self, event: StudyEnded) -> None:
        pass

    def close(self) -> None:
        pass


__all__ = [
    "BaseObserver",
    "StudyEnded",
    "StudyObserver",
    "StudyStarted",
    "TrialFinished",
    "TrialReported",
    "TrialStarted",
]
