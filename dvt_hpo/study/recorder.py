"""What Optuna records of a finished trial: its attrs, a pure function of the outcome and of
what the run saw (:func:`trial_attrs`), then the tell (COMPLETE, PRUNED, FAIL, or a FAIL
retried through the recovery rule), the resume folder's fate, ``trials.keep_logs``, and the
:class:`~dvt_hpo.results.outcome.TrialOutcome` the loop hears.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dvt_hpo.budget.trials import limit_name
from dvt_hpo.optuna_api.private import storage_of, trial_id_of
from dvt_hpo.process import launch
from dvt_hpo.process.tree import describe_exit
from dvt_hpo.recovery import kill_points, node_health, resume, retries
from dvt_hpo.recovery.pause import mark as pause_mark
from dvt_hpo.results.curve import history_attr
from dvt_hpo.results.outcome import RECORDED_ELSEWHERE, Outcome, TrialOutcome, trial_state
from dvt_hpo.sampling.constraints import store_constraints
from dvt_hpo.wire.trial_dir import TrialDir

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.study.handle import StudyHandle

__all__ = [
    "Recorder",
    "RunFacts",
    "tell",
    "trial_attrs",
]

_STDERR_TAIL_LINES = 50
_ATTR_TEXT_CHARS = 8000


@dataclass(frozen=True)
class RunFacts:
    """What the run saw of a trial, besides its outcome: what its attrs are made of."""

    duration_s: float
    returncode: int | None
    history: Sequence[tuple[int, dict[str, float]]] = ()
    pruned_step: int | None = None
    paused: bool = False  # trials.pause: the pruner's stop pauses it (when it ends PRUNED)
    over_budget: str | None = None
    diverged_step: int | None = None
    strays: Sequence[Any] = ()
    resumed: Mapping[str, Any] = field(default_factory=dict)  # resume.end_attrs
    machine: str | None = None  # the kind of machine error a FAIL met
    stderr_tail: str | None = None  # of a FAIL


def trial_attrs(
    outcome: Outcome, facts: RunFacts, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The user attrs of a finished trial (``extra`` first, then its own)."""
    attrs: dict[str, Any] = {
        **(extra or {}),
        "duration_s": round(facts.duration_s, 3),
        "exit": describe_exit(facts.returncode) if facts.returncode is not None else "unknown",
        "epochs_reported": len(facts.history),
        "status": outcome.status,
    }
    if facts.history:
        attrs["last_step"] = facts.history[-1][0]
        attrs["last_metrics"] = facts.history[-1][1]
        attrs["history"] = history_attr(facts.history)
    if facts.pruned_step is not None:
        attrs["pruned_step"] = facts.pruned_step
    if facts.over_budget is not None and outcome.state != "COMPLETE":
        attrs["status"] = "over-budget"
        # The limit's name, as a closed retry copy has it; the line (how much was spent) is in
        # the reason the strict stop gives (TrialRun).
        attrs["over_budget"] = limit_name(facts.over_budget)
    attrs.update(facts.resumed)
    if facts.strays:
        # Processes that left the trial's group, found by its token and stopped.
        attrs["strays_stopped"] = list(facts.strays)
    if facts.diverged_step is not None:
        attrs["diverged_step"] = facts.diverged_step
    if outcome.state == "PRUNED":
        # Pruning ends the trial process with its own exit code: say which it is.
        attrs["reason"] = outcome.reason
        attrs["exit"] = f"pruned ({attrs['exit']})"
        if facts.paused:
            attrs["status"] = "paused"
            attrs["reason"] = (
                f"paused at step {facts.pruned_step} (trials.pause): continued if it ranks in "
                "the top of that step while the study runs"
            )
    if outcome.state == "FAIL":
        attrs["reason"] = (outcome.reason or "")[:2000]
        if facts.stderr_tail:
            attrs["stderr_tail"] = facts.stderr_tail[-_ATTR_TEXT_CHARS:]
        if outcome.traceback:
            attrs["traceback"] = outcome.traceback[-_ATTR_TEXT_CHARS:]
        if facts.machine is not None:
            attrs["machine_failure"] = facts.machine
    return attrs


def stderr_tail(trial_dir: Path) -> str | None:
    return launch.tail_lines(TrialDir(trial_dir).stderr, _STDERR_TAIL_LINES) or None


class Recorder:
    """Records one trial's end in the study."""

    def __init__(
        self, study: StudyHandle, trial: optuna.Trial, params: dict[str, Any], trial_dir: Path
    ) -> None:
        self.study = study
        self.spec = study.spec
        self.trial = trial
        self.trial_id = trial_id_of(trial)
        self.number = trial.number
        self.params = params
        self.trial_dir = trial_dir

    def machine_failure(self, outcome: Outcome) -> tuple[str | None, bool]:
        """The kind of machine error a FAIL met (:mod:`dvt_hpo.recovery.node_health`), and
        whether its attempt is retried for it (within the machine limit of its chain)."""
        node_failures = self.spec.trials.node_failures
        if outcome.state != "FAIL" or outcome.retry or not node_failures:
            return None, False
        kind = node_health.machine_failure(outcome.reason)
        if kind is None:
            return None, False
        with self.study.lock:
            trial = self.study.db(
                lambda: self.study.storage.get_trial(self.trial_id), "reading the trial"
            )
        limit = node_health.machine_retry_limit(node_failures)
        return kind, retries.machine_retries(trial) < limit

    def record(
        self,
        outcome: Outcome,
        facts: RunFacts,
        reported: Mapping[str, Any],
        plan: resume.ResumePlan | None,
        extra: Mapping[str, Any] | None = None,
    ) -> TrialOutcome:
        """Store the trial's attrs (``extra`` and its own, in one transaction) and tell Optuna
        (a retried FAIL through the recovery rule: one copy per failed attempt, by any worker).
        ``reported``: the attrs the trial sent itself."""
        elsewhere = self._finished_elsewhere()
        if elsewhere is not None:
            return self._left_as_recorded(elsewhere, facts.duration_s, reported)
        machine, machine_retry = self.machine_failure(outcome)
        facts = _with(facts, machine, plan, self.trial_dir if outcome.state == "FAIL" else None)
        # Paused only when it ended PRUNED (a trial that crashed while stopping is a FAIL) and
        # its state can be kept.
        paused = facts.paused and outcome.state == "PRUNED" and plan is not None
        facts = dataclasses.replace(facts, paused=paused)
        attrs = trial_attrs(outcome, facts, extra)
        self.study.set_trial_attrs(self.trial_id, attrs)
        kill_points.reached("record:before_tell")
        value, told_trial = self._tell(outcome, machine, machine_retry, paused)
        if plan is not None:
            resume.on_end(plan, outcome.retry, self.spec.trials.max_retries, paused=paused)
        self.apply_keep_logs(outcome.state)
        if self.study.budget is not None:
            # After the tell: the study's spent / total with this trial, for the observers.
            with contextlib.suppress(Exception):
                attrs.update(self.study.budget.event_attrs())
        bs = reported.get("batch_size")
        return TrialOutcome(
            number=self.number,
            trial_id=self.trial_id,
            state=outcome.state,
            value=value,
            params=self.params,
            duration_s=facts.duration_s,
            reason=attrs["reason"]
            if paused
            else outcome.reason
            if outcome.state != "COMPLETE"
            else None,
            interrupted=outcome.retry or machine_retry,
            batch_size=bs if isinstance(bs, int) else None,
            user_attrs={**reported, **attrs},
            values=outcome.values,
            constraints=outcome.constraints,
            machine=machine,
            paused=paused,
            told=told_trial,
        )

    def _finished_elsewhere(self) -> optuna.trial.FrozenTrial | None:
        """The trial as stored, when another worker finished it while it ran here: a sweep
        failed it as stale (its heartbeats did not land in time, e.g. through a database
        outage) and queued a copy, or recorded it from its result. That record stands."""
        with self.study.lock:
            stored = self.study.db(
                lambda: self.study.storage.get_trial(self.trial_id), "reading the trial"
            )
        return stored if stored.state.is_finished() else None

    def _left_as_recorded(
        self, stored: optuna.trial.FrozenTrial, duration_s: float, reported: Mapping[str, Any]
    ) -> TrialOutcome:
        """This worker writes nothing of a trial another worker finished: no attrs, no tell,
        and its resume folder and logs stay, since the copy now continuing the chain owns the
        folder. A FAIL so recorded was failed for a retry: an interruption, not a failure."""
        state = stored.state.name
        if state == "FAIL":
            how = (
                "another worker failed it as stale meanwhile (no heartbeat of it landed within "
                "study.grace_period_s) and queued its retry"
            )
        else:
            how = f"another worker recorded it {state} meanwhile"
        return TrialOutcome(
            number=self.number,
            trial_id=self.trial_id,
            state=state,
            value=stored.value if state == "COMPLETE" else None,
            params=self.params,
            duration_s=duration_s,
            reason=f"{how}; that record stands",
            interrupted=state == "FAIL",
            user_attrs={**reported, "status": RECORDED_ELSEWHERE},
        )

    def _tell(
        self, outcome: Outcome, machine: str | None, machine_retry: bool, paused: bool
    ) -> tuple[float | None, Any]:
        value = outcome.value
        told: float | list[float] | None = (
            list(outcome.values) if self.spec.objective.is_multi else value
        )
        told_trial: Any = None
        study, db, trial = self.study.study, self.study.db, self.trial
        with self.study.lock:
            if outcome.state in ("COMPLETE", "PRUNED") and self.spec.objective.constraints:
                # Before the tell, for every sampler: best_trial(s) and the dashboard read
                # them; samplers with a constraints_func read them back at the tell.
                constraints = outcome.constraints
                db(
                    lambda: store_constraints(self.study.storage, self.trial_id, constraints),
                    "recording",
                )
            # skip_if_finished: a tell retried after an outage may have landed the first time.
            if outcome.state == "COMPLETE":
                told_trial = db(
                    lambda: tell(study, trial, told, skip_if_finished=True), "recording"
                )
            elif outcome.state == "PRUNED":
                if paused:
                    # Marked while RUNNING: a worker killed before the tell leaves a RUNNING
                    # trial the sweep retries (its copy resumes the state), never a paused
                    # trial without its mark.
                    db(lambda: pause_mark(self.study.storage, self.trial_id), "recording")
                told_trial = db(
                    lambda: tell(study, trial, state=trial_state("PRUNED"), skip_if_finished=True),
                    "recording",
                )
                value = told_trial.value
            elif outcome.retry or machine_retry:
                if machine_retry and machine is not None:
                    db(
                        lambda: retries.mark_machine_failure(
                            self.study.storage, self.trial_id, machine
                        ),
                        "recording",
                    )
                self.study.fail_attempt(self.trial_id)
            else:
                told_trial = db(
                    lambda: tell(study, trial, state=trial_state("FAIL"), skip_if_finished=True),
                    "recording",
                )
        return value, told_trial

    def apply_keep_logs(self, state: str) -> None:
        """``trials.keep_logs``: a finished trial's folder is removed unless the rule keeps it
        (``all``; ``failed`` keeps FAIL only; ``none`` keeps nothing)."""
        keep = self.spec.trials.keep_logs
        if keep == "all" or (keep == "failed" and state == "FAIL"):
            return
        shutil.rmtree(self.trial_dir, ignore_errors=True)
        self.study.set_trial_attrs(self.trial_id, {"log_dir": f"removed (trials.keep_logs={keep})"})


def _with(
    facts: RunFacts, machine: str | None, plan: resume.ResumePlan | None, failed_in: Path | None
) -> RunFacts:
    return dataclasses.replace(
        facts,
        machine=machine,
        resumed=resume.end_attrs(plan) if plan is not None else {},
        stderr_tail=stderr_tail(failed_in) if failed_in is not None else None,
    )


def tell(study: optuna.Study, trial: optuna.Trial, *args: Any, **kwargs: Any) -> Any:
    """``study.tell``, where a sampler's ``study.stop()`` is not an error. The grid sampler
    stops the study when its grid is used up; outside ``Study.optimize`` Optuna raises that as
    a RuntimeError after the trial was recorded. The loop's own budget decides when to stop."""
    try:
        return study.tell(trial, *args, **kwargs)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise
        return storage_of(study).get_trial(trial_id_of(trial))
