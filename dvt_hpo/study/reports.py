"""A trial's reports, as the control socket hands them over: the handler of one trial's socket,
and the one :class:`PruneDecision` each report gets.

The control server calls the handler's methods on its own threads, so everything they share with
the study loop goes through the study's lock. Four paths stop a trial at a report, and each is
one :class:`PruneDecision`: a diverged objective (NaN or inf), the pruner for several objectives,
Optuna's pruner for one, and a strict ``study.budget`` found spent once the report is stored.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dvt_hpo.recovery import resume
from dvt_hpo.results.events import TrialReported
from dvt_hpo.wire.protocol import Hello

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.recovery.resume import ResumePlan
    from dvt_hpo.study.handle import StudyHandle

__all__ = ["PruneDecision", "ReportHandler", "diverged"]


@dataclass(frozen=True)
class PruneDecision:
    """What one report decides: stop the trial (``prune``) and why. ``diverged`` is the step,
    the value and the metric of a NaN/inf objective (recorded FAIL "diverged"); ``over_budget``
    the spent limit of a strict ``study.budget`` (recorded "over-budget"); otherwise a pruner
    stopped it (recorded PRUNED; ``pause``: paused, its state kept to continue it)."""

    prune: bool
    step: int | None = None
    diverged: tuple[int, float, str] | None = None
    over_budget: str | None = None
    pause: bool = False  # trials.pause: the pruner stopped it before its last epoch


KEEP = PruneDecision(False)


def epochs_left(config: Any, reports: int) -> bool:
    """Whether a trial that sent ``reports`` distinct reports has epochs left to train: fewer
    reports than its config's ``epochs`` (unknown epochs: assume so)."""
    epochs = config.get("epochs") if isinstance(config, dict) else None
    return not isinstance(epochs, int) or isinstance(epochs, bool) or reports < epochs


def diverged(step: int, metrics: dict[str, float], names: Sequence[str]) -> PruneDecision | None:
    """A diverged run never recovers and Optuna cannot prune on NaN: stop it now (the "prune"
    answer makes the trainer leave cleanly) and record it FAIL "diverged"."""
    for name in names:
        reported = metrics.get(name)
        if reported is not None and not math.isfinite(float(reported)):
            return PruneDecision(True, diverged=(step, float(reported), name))
    return None


class ReportHandler:
    """One trial's control-socket handler: the reports it streams, the attrs it sends, the
    study cache it asks, and the decisions taken on them."""

    study: StudyHandle
    trial: optuna.Trial
    trial_id: int
    number: int
    start_time: float
    resume: ResumePlan | None
    config: dict[str, Any]  # the trial's trainer config (its params written in)

    def _init_reports(self) -> None:
        self.history: list[tuple[int, dict[str, float]]] = []
        self.pruned_step: int | None = None
        self.paused = False  # trials.pause: the pruner's stop pauses it (PruneDecision.pause)
        self.diverged: tuple[int, float] | None = None  # (step, value) of a NaN/inf objective
        self.diverged_metric: str | None = None
        self.protocol_error: str | None = None
        self.attrs: dict[str, Any] = {}
        self.stop_event = threading.Event()
        # study.budget.strict: why it was stopped; _unanswered: by the loop, not by a report's
        # answer (so its process is stopped at once rather than left to exit on its own).
        self.over_budget: str | None = None
        self._unanswered_stop = False
        # Finished by another worker while it ran (a report found it so): stopped at once.
        self.superseded = False

    def _set_attrs(self, attrs: dict[str, Any]) -> None:
        self.study.set_trial_attrs(self.trial_id, attrs)

    # -- called on the server's threads ----------------------------------------------------
    def on_hello(self, hello: Hello) -> None:
        return None

    def on_protocol_error(self, message: str) -> None:
        self.protocol_error = message
        self.stop_event.set()

    def on_report(self, step: int, metrics: dict[str, float]) -> bool:
        import optuna

        if self.superseded:
            return True
        try:
            return self._on_report(int(step), metrics)
        except optuna.exceptions.UpdateFinishedTrialError:
            # Another worker failed it as stale meanwhile (its heartbeats did not land in
            # time) and queued a copy that continues its chain: it must stop at once, before
            # it writes the chain's state again under the copy.
            self.superseded = True
            self._unanswered_stop = True
            self.stop_event.set()
            return True

    def _on_report(self, step: int, metrics: dict[str, float]) -> bool:
        if self.resume is not None:
            self._splice(step)
            self.resume.write_curve([*self.history, (step, metrics)])
        self.history.append((step, dict(metrics)))
        if self.pruned_step is not None or self.diverged is not None:
            return True
        decision = self._decide(step, metrics)
        self._apply(decision)
        return decision.prune

    def _splice(self, step: int | None) -> None:
        """``trials.resume``: the first report of a copy takes its chain's earlier reports in,
        stored in Optuna too (one objective), so pruning sees the whole curve; ``None`` (a copy
        that reported nothing, its state covering every epoch): all of them. The copy's
        ``resumed_epochs`` / ``redone_epochs`` are stored at once, so whoever records the
        attempt (its worker, or a sweep after the worker died) has them."""
        assert self.resume is not None
        if self.resume.spliced is not None or (step is None and not self.resume.earlier):
            return
        objective = self.study.spec.objective
        metric = None if objective.is_multi else objective.metric
        taken = self.resume.splice(step)
        for s, m in taken:
            self.history.append((s, m))
            value = m.get(metric) if metric is not None else None
            if value is not None and math.isfinite(value):

                def store(s: int = s, value: float = value) -> None:
                    self.trial.report(value, s)

                with self.study.lock:
                    self.study.db(store, "storing a resumed curve")
        attrs = resume.end_attrs(self.resume)
        if attrs:
            self._set_attrs(attrs)

    def _decide(self, step: int, metrics: dict[str, float]) -> PruneDecision:
        objective = self.study.spec.objective
        bad = diverged(step, metrics, objective.names)
        if bad is not None:
            return bad
        if objective.is_multi:
            return self._decide_multi(step, metrics)
        value = metrics.get(objective.metric)
        promoted_at = self.resume.promoted_at if self.resume is not None else None
        if value is not None:

            def decide() -> bool:
                self.trial.report(float(value), step)
                if promoted_at is not None and step <= promoted_at:
                    return False  # a continuation retraining steps it was promoted past
                return bool(self.trial.should_prune())

            with self.study.lock:
                if self.study.db(decide, "a pruning decision"):
                    return PruneDecision(True, step, pause=self._pausable(step))
        budget = self.study.budget
        if budget is not None and budget.strict and self.over_budget is None:
            # After this report is stored: an epochs budget counts it, so the stop is exact.
            why = budget.exhausted()
            if why is not None:
                return PruneDecision(True, step, over_budget=why)
        return KEEP

    def _pausable(self, step: int) -> bool:
        """``trials.pause``: a stop before the last epoch pauses (at the last one nothing is
        left to continue). Counted by reports, not by step: a trainer may count steps from 1."""
        if not self.study.spec.trials.pause:
            return False
        return epochs_left(self.config, len({s for s, _ in self.history}))

    def _decide_multi(self, step: int, metrics: dict[str, float]) -> PruneDecision:
        # Optuna cannot prune multi-objective trials (Trial.report raises): the epoch is
        # stored, so status and the dashboard show where the trial is, and a pruner for
        # several objectives decides on the values it stores itself.
        objective = self.study.spec.objective
        self._set_attrs({"last_step": step, "last_metrics": dict(metrics)})
        from dvt_hpo.sampling.kinds import MULTI_OBJECTIVE_PRUNERS
        from dvt_hpo.sampling.mo_pruner import report_and_prune

        if self.study.spec.study.pruner.kind not in MULTI_OBJECTIVE_PRUNERS:
            return KEEP
        with self.study.lock:
            prune = self.study.db(
                lambda: report_and_prune(
                    self.study.study,
                    self.trial_id,
                    step,
                    metrics,
                    objective.names,
                    objective.constraints,
                ),
                "a pruning decision",
            )
        return PruneDecision(True, step) if prune else KEEP

    def _apply(self, decision: PruneDecision) -> None:
        if not decision.prune:
            return
        if decision.diverged is not None:
            step, value, metric = decision.diverged
            self.diverged, self.diverged_metric = (step, value), metric
        else:
            self.pruned_step = decision.step
            self.paused = decision.pause
            if decision.over_budget is not None:
                self.over_budget = decision.over_budget
        self.stop_event.set()

    def on_reported(self, step: int, metrics: dict[str, float], prune: bool) -> None:
        elapsed_s = time.monotonic() - self.start_time
        self.study.observers.trial_reported(
            TrialReported(self.number, int(step), dict(metrics), round(elapsed_s, 3))
        )

    def on_attrs(self, attrs: dict[str, Any]) -> None:
        self.attrs.update(attrs)
        self._set_attrs(attrs)

    def on_cache_get(self, key: str) -> dict[str, Any] | None:
        return self.study.cache.get(key)

    def on_cache_put(self, key: str, value: dict[str, Any]) -> None:
        self.study.cache.put(key, value)
