"""``study.budget``: how much compute a study has spent, read from the study's storage so that
every worker and every resume shares one figure.

- ``gpu_hours``: each trial's GPUs (a ``trials.per_gpu`` share counts its fraction) times its
  duration; ``cpu_hours``: a CPU trial's threads times its duration. A trial's units are stored
  when it starts (trial system attr :data:`UNITS_ATTR`); its duration is Optuna's own
  ``datetime_start`` to ``datetime_complete`` (now, while it runs).
- ``epochs``: the objective's reports, summed (what a pruned trial stopped at counts, not the
  trainer's ``epochs``).
- ``hours``: wall time since the study's first run (study system attr :data:`STARTED_ATTR`,
  written once under the study's lock, so a resume a week later counts the week).

Every attempt's compute counts, a failed or interrupted one too (it was spent); trials copied
from an earlier study (``warm_start.copy_results``) and trials closed as over ``n_trials`` at
once do not. A worker starts no trial once any limit is spent; ``strict`` also stops the trials then running
(:meth:`BudgetWatch.decide` answers, the loop applies). Two workers may both see the budget unspent and launch at the same
instant, so at most one trial per slot of each worker runs past it.

Finished trials never change, so each is read once; only unfinished ones are read again
(:class:`~dvt_hpo.store.trial_reader.TrialReader`, shared with the ledger of ``n_trials``).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dvt_hpo.budget.trials import OVER_BUDGET_ATTR, PRIOR_ATTR
from dvt_hpo.optuna_api.private import trial_id_of
from dvt_hpo.store.trial_reader import TrialReader

if TYPE_CHECKING:
    from dvt_hpo.devices.slots import Slot
    from dvt_hpo.spec.model import BudgetSpec, StudySpec

__all__ = [
    "STARTED_ATTR",
    "UNITS_ATTR",
    "BudgetDecision",
    "BudgetWatch",
    "ComputeLedger",
    "Spent",
    "budget_text",
    "check_slots",
    "exhausted",
    "mark_started",
    "slot_units",
    "status_line",
    "status_numbers",
    "watch",
]

STARTED_ATTR = "dvt_hpo:started_at"  # study system attr: epoch seconds of its first run
UNITS_ATTR = "dvt_hpo:units"  # trial system attr: {"gpus": float, "cpu_threads": int}
_FINISHED = ("COMPLETE", "PRUNED", "FAIL")


@dataclass(frozen=True)
class Spent:
    gpu_hours: float = 0.0
    cpu_hours: float = 0.0
    epochs: int = 0
    hours: float = 0.0

    def of(self, limit: str) -> float:
        return float(getattr(self, limit))


def _limits(budget: BudgetSpec) -> list[tuple[str, float]]:
    from dvt_hpo.studyfile.budget import LIMITS

    return [(name, float(v)) for name in LIMITS if (v := getattr(budget, name)) is not None]


def _show(limit: str, value: float) -> str:
    return f"{int(value)}" if limit == "epochs" else f"{value:.3g}"


def exhausted(budget: BudgetSpec, spent: Spent) -> str | None:
    """Which limit is spent, as a line (None while every limit has some left)."""
    for limit, total in _limits(budget):
        if spent.of(limit) >= total:
            return (
                f"study.budget.{limit}={_show(limit, total)} spent "
                f"({_show(limit, spent.of(limit))} {limit.replace('_', '-')})"
            )
    return None


def budget_text(budget: BudgetSpec, spent: Spent) -> str:
    """``"epochs 37/100, gpu_hours 0.41/10"``: spent / total of every limit."""
    return ", ".join(
        f"{limit} {_show(limit, spent.of(limit))}/{_show(limit, total)}"
        for limit, total in _limits(budget)
    )


def slot_units(
    slot: Slot, nproc_per_node: int, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """What a trial in ``slot`` occupies: its GPUs (a share counts its fraction) and, on the
    CPU, its threads (``OMP_NUM_THREADS`` as the trial gets it, else every core)."""
    gpus = len(slot.gpus) / max(1, slot.per_gpu)
    env = os.environ if env is None else env
    threads = slot.omp_num_threads
    if "OMP_NUM_THREADS" in env and str(env["OMP_NUM_THREADS"]).isdigit():
        threads = int(env["OMP_NUM_THREADS"])  # the user's choice wins (process.launch)
    if threads is None:
        threads = os.cpu_count() or 1
    cpu_threads = 0 if gpus else threads * max(1, nproc_per_node)
    return {"gpus": gpus, "cpu_threads": cpu_threads}


def mark_started(storage: Any, study_id: int, lock: Callable[[], Any]) -> float:
    """The study's start (epoch seconds), written once: by its first run, or for a study run
    before this release, its first trial's start."""
    stored = storage.get_study_system_attrs(study_id).get(STARTED_ATTR)
    if stored is not None:
        return float(stored)
    with lock():
        stored = storage.get_study_system_attrs(study_id).get(STARTED_ATTR)
        if stored is not None:
            return float(stored)
        started = time.time()
        with contextlib.suppress(KeyError):
            first = storage.get_trial(storage.get_trial_id_from_study_id_trial_number(study_id, 0))
            if first.datetime_start is not None:
                started = min(started, first.datetime_start.timestamp())
        storage.set_study_system_attr(study_id, STARTED_ATTR, started)
        return started


@dataclass(frozen=True)
class _Cost:
    gpu_s: float
    cpu_s: float
    epochs: int


def _units(trial: Any) -> tuple[float, int]:
    units = trial.system_attrs.get(UNITS_ATTR)
    if isinstance(units, dict):
        return float(units.get("gpus", 0)), int(units.get("cpu_threads", 0))
    # A trial started before units were stored: what its user attrs say it had.
    devices = trial.user_attrs.get("devices")
    gpus = len([d for d in str(devices).split(",") if d]) if devices else 0
    threads = trial.user_attrs.get("threads")
    return float(gpus), 0 if gpus else int(threads) if isinstance(threads, int) else 1


def cost_of(trial: Any, now: datetime.datetime | None = None) -> _Cost:
    """One trial's compute so far (a finished trial's for good)."""
    if trial.system_attrs.get(PRIOR_ATTR) or trial.system_attrs.get(OVER_BUDGET_ATTR):
        return _Cost(0.0, 0.0, 0)
    reported = trial.user_attrs.get("epochs_reported")
    epochs = max(len(trial.intermediate_values), reported if isinstance(reported, int) else 0)
    # A resumed copy stores its chain's earlier reports too: those epochs were counted once,
    # on the attempt that trained them.
    resumed = trial.user_attrs.get("resumed_epochs")
    epochs -= min(epochs, resumed) if isinstance(resumed, int) else 0
    start = trial.datetime_start
    if start is None:  # WAITING
        return _Cost(0.0, 0.0, epochs)
    end = trial.datetime_complete or now or datetime.datetime.now()
    seconds = max(0.0, (end - start).total_seconds())
    gpus, threads = _units(trial)
    return _Cost(gpus * seconds, threads * seconds, epochs)


class ComputeLedger:
    """The study's compute spent, read incrementally
    (:class:`~dvt_hpo.store.trial_reader.TrialReader`): a finished trial's cost is summed once."""

    def __init__(self, storage: Any, study_id: int) -> None:
        self._done = _Cost(0.0, 0.0, 0)  # finished trials, summed
        self._reader: TrialReader[Any] = TrialReader(
            storage,
            study_id,
            first=lambda: (
                (t.number, trial_id_of(t), t)
                for t in storage.get_all_trials(study_id, deepcopy=False)
            ),
            one=lambda number, trial_id: storage.get_trial(trial_id),
            finished=lambda trial: trial.state.name in _FINISHED,
        )

    def spent(self, started_at: float, now: float | None = None) -> Spent:
        now = time.time() if now is None else now
        live: list[Any] = []
        for _number, trial in self._reader.read():
            if trial.state.name in _FINISHED:
                c, d = cost_of(trial), self._done
                self._done = _Cost(d.gpu_s + c.gpu_s, d.cpu_s + c.cpu_s, d.epochs + c.epochs)
            else:
                live.append(trial)
        at = datetime.datetime.fromtimestamp(now)
        gpu_s, cpu_s, epochs = self._done.gpu_s, self._done.cpu_s, self._done.epochs
        for trial in live:
            c = cost_of(trial, at)
            gpu_s, cpu_s, epochs = gpu_s + c.gpu_s, cpu_s + c.cpu_s, epochs + c.epochs
        return Spent(gpu_s / 3600, cpu_s / 3600, epochs, max(0.0, now - started_at) / 3600)


class BudgetWatch:
    """A run's view of ``study.budget``: what is spent, whether a limit is reached, and the
    launch gate and strict stops that follow (:meth:`decide`)."""

    def __init__(
        self,
        budget: BudgetSpec,
        storage: Any,
        study_id: int,
        started_at: float,
        *,
        study_lock: Any,
        db: Callable[..., Any],
    ) -> None:
        self.budget = budget
        self.started_at = started_at
        self._storage = storage
        self._ledger = ComputeLedger(storage, study_id)
        self._study_lock = study_lock
        self._db = db

    @property
    def strict(self) -> bool:
        return self.budget.strict

    def spent(self) -> Spent:
        with self._study_lock:
            return self._db(lambda: self._ledger.spent(self.started_at), "counting the budget")

    def exhausted(self) -> str | None:
        return exhausted(self.budget, self.spent())

    def event_attrs(self) -> dict[str, Any]:
        """What a finished trial's event carries: ``budget`` (spent / total, as text),
        ``budget_spent.<limit>`` and ``budget_total.<limit>`` (numbers), for the run's lines,
        the progress bar and MLflow."""
        spent = self.spent()
        return {
            "budget": budget_text(self.budget, spent),
            **{f"budget_spent.{k}": round(spent.of(k), 6) for k, _ in _limits(self.budget)},
            **{f"budget_total.{k}": total for k, total in _limits(self.budget)},
        }

    def record_units(self, trial_id: int, slot: Slot, nproc_per_node: int) -> None:
        units = slot_units(slot, nproc_per_node)
        with self._study_lock:
            self._db(
                lambda: self._storage.set_trial_system_attr(trial_id, UNITS_ATTR, units),
                "recording",
            )

    def decide(self, running: Collection[int]) -> BudgetDecision:
        """What the loop does now: whether a new trial may start and, with ``strict``, which of
        the ``running`` trials (their numbers) it stops. No trial starts once the budget is
        spent (the loop says why once and waits for its running trials); a strict budget stops
        them too: here, at each report (the trial's run asks :meth:`exhausted`), and every
        heartbeat interval while the loop runs, for trials that report rarely or never."""
        why = self.exhausted()
        if why is None:
            return BudgetDecision(None)
        if not running:
            return BudgetDecision(f"{why}: no new trials", why)
        if not self.strict:
            return BudgetDecision(
                f"{why}: no new trials; waiting for {len(running)} running trial(s)", why
            )
        return BudgetDecision(
            f"{why}: no new trials; stopping {len(running)} running trial(s) (strict)",
            why,
            frozenset(running),
        )


@dataclass(frozen=True)
class BudgetDecision:
    """The budget's answer to the loop: ``refused`` says why no trial starts (None: one may),
    ``why`` is the spent limit as a line, ``stop`` the running trials a strict budget stops."""

    refused: str | None
    why: str | None = None
    stop: frozenset[int] = frozenset()


def watch(
    spec: StudySpec, storage: Any, study_id: int, *, study_lock: Any, db: Callable[..., Any]
) -> BudgetWatch | None:
    """The :class:`BudgetWatch` of an open study (None without ``study.budget``)."""
    if spec.study.budget is None:
        return None
    stored = storage.get_study_system_attrs(study_id).get(STARTED_ATTR)
    started = float(stored) if stored is not None else time.time()
    return BudgetWatch(spec.study.budget, storage, study_id, started, study_lock=study_lock, db=db)


def status_line(
    storage: Any, study_id: int, spec: StudySpec, now: float | None = None
) -> str | None:
    """``study.budget`` spent / total as ``status`` and the report show it (None without one)."""
    budget = spec.study.budget
    if budget is None:
        return None
    now = time.time() if now is None else now
    started = storage.get_study_system_attrs(study_id).get(STARTED_ATTR, now)
    spent = ComputeLedger(storage, study_id).spent(float(started), now)
    line = budget_text(budget, spent)
    return f"{line} (spent: no new trials)" if exhausted(budget, spent) else line


def status_numbers(
    storage: Any, study_id: int, spec: StudySpec, now: float | None = None
) -> dict[str, Any] | None:
    """``study.budget`` as numbers, for ``status --json``: ``{"limits": {limit: {"spent": x,
    "total": y}}, "spent": true when a limit is spent (no new trials)}`` (None without one)."""
    budget = spec.study.budget
    if budget is None:
        return None
    now = time.time() if now is None else now
    started = storage.get_study_system_attrs(study_id).get(STARTED_ATTR, now)
    spent = ComputeLedger(storage, study_id).spent(float(started), now)
    limits = {k: {"spent": round(spent.of(k), 6), "total": total} for k, total in _limits(budget)}
    return {"limits": limits, "spent": exhausted(budget, spent) is not None}


def check_slots(spec: StudySpec, slots: Sequence[Slot]) -> None:
    """A budget in GPU-hours alone where no trial slot has a GPU would never be spent: refused
    (exit 2) by ``run``'s and ``validate``'s machine checks, before anything is written."""
    budget = spec.study.budget
    if budget is None or budget.gpu_hours is None or budget.cpu_hours is not None:
        return
    if any(slot.gpus for slot in slots):
        return
    from dvt_hpo.exceptions import SpecError

    file, line = spec.locate("study.budget.gpu_hours")
    raise SpecError(
        "counts GPU time, but no trial slot here has a GPU (trials.devices "
        f"{spec.trials.devices!r}): its trials would spend nothing; give the budget as "
        "cpu_hours (a trial's CPU threads x its duration) or run where GPUs are visible",
        file=file,
        line=line,
        field="study.budget.gpu_hours",
    )
