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
once do not. A worker starts no trial once any limit is spent (:func:`watch` chains the budget
into the run's launch gate); ``strict`` also stops the trials then running
(:class:`BudgetWatch`). Two workers may both see the budget unspent and launch at the same
instant, so at most one trial per slot of each worker runs past it.

Finished trials never change, so each is read once; only unfinished ones are read again.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dvt_hpo.budget.trials import OVER_BUDGET_ATTR, PRIOR_ATTR
from dvt_hpo.optuna_api.private import trial_id_of

if TYPE_CHECKING:
    from dvt_hpo.devices.slots import Slot
    from dvt_hpo.spec.model import BudgetSpec, StudySpec

__all__ = [
    "STARTED_ATTR",
    "UNITS_ATTR",
    "BudgetWatch",
    "ComputeLedger",
    "Spent",
    "budget_text",
    "check_slots",
    "exhausted",
    "mark_started",
    "slot_units",
    "status_line",
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
    start = trial.datetime_start
    if start is None:  # WAITING
        return _Cost(0.0, 0.0, epochs)
    end = trial.datetime_complete or now or datetime.datetime.now()
    seconds = max(0.0, (end - start).total_seconds())
    gpus, threads = _units(trial)
    return _Cost(gpus * seconds, threads * seconds, epochs)


class ComputeLedger:
    """The study's compute spent, read incrementally (trial numbers are dense: new trials are
    found by asking for the next number until the storage has none)."""

    def __init__(self, storage: Any, study_id: int) -> None:
        self._storage = storage
        self._study_id = study_id
        self._done = _Cost(0.0, 0.0, 0)  # finished trials, summed
        self._ids: dict[int, int] = {}  # number -> trial id, every trial read
        self._unfinished: set[int] = set()

    def _add(self, number: int, trial: Any) -> None:
        self._ids[number] = trial_id_of(trial)
        if trial.state.name in _FINISHED:
            self._unfinished.discard(number)
            c = cost_of(trial)
            d = self._done
            self._done = _Cost(d.gpu_s + c.gpu_s, d.cpu_s + c.cpu_s, d.epochs + c.epochs)
        else:
            self._unfinished.add(number)

    def spent(self, started_at: float, now: float | None = None) -> Spent:
        now = time.time() if now is None else now
        storage = self._storage
        if not self._ids:
            for trial in storage.get_all_trials(self._study_id, deepcopy=False):
                self._add(trial.number, trial)
        live: list[Any] = []
        for number in sorted(self._unfinished):
            trial = storage.get_trial(self._ids[number])
            self._add(number, trial)
            if number in self._unfinished:
                live.append(trial)
        number = len(self._ids)
        while True:
            try:
                trial_id = storage.get_trial_id_from_study_id_trial_number(self._study_id, number)
            except KeyError:
                break
            trial = storage.get_trial(trial_id)
            self._add(number, trial)
            if number in self._unfinished:
                live.append(trial)
            number += 1
        at = datetime.datetime.fromtimestamp(now)
        gpu_s, cpu_s, epochs = self._done.gpu_s, self._done.cpu_s, self._done.epochs
        for trial in live:
            c = cost_of(trial, at)
            gpu_s, cpu_s, epochs = gpu_s + c.gpu_s, cpu_s + c.cpu_s, epochs + c.epochs
        return Spent(gpu_s / 3600, cpu_s / 3600, epochs, max(0.0, now - started_at) / 3600)


class BudgetWatch:
    """A run's view of ``study.budget``: what is spent, whether a limit is reached, and the
    launch gate and strict stops that follow (:func:`watch`)."""

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
        self._stopper: threading.Thread | None = None

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

    def attach(self, runner: Any) -> None:
        """Chain the budget into ``runner.launch_gate``: no trial starts once it is spent (the
        loop says why once and waits for its running trials). With ``strict``, the running
        trials are stopped too: by the gate, by each report (:class:`TrialRun`), and by a
        thread that looks every heartbeat interval while the loop runs, for trials that
        report rarely or never."""
        previous = runner.launch_gate

        def gate(study: Any) -> str | None:
            refused = previous(study) if previous is not None else None
            if refused is not None:
                return refused
            if self.strict and self._stopper is None:
                self._stopper = threading.Thread(
                    target=self._stop_when_spent, args=(runner,), name="budget", daemon=True
                )
                self._stopper.start()
            why = self.exhausted()
            if why is None:
                return None
            running = list(runner.running.values())
            if not running:
                return f"{why}: no new trials"
            if not self.strict:
                return f"{why}: no new trials; waiting for {len(running)} running trial(s)"
            for run in running:
                run.stop_over_budget(why)
            return f"{why}: no new trials; stopping {len(running)} running trial(s) (strict)"

        runner.launch_gate = gate

    def _stop_when_spent(self, runner: Any) -> None:
        # The loop sets the runner's heartbeat stop event when it ends: so does this thread.
        interval_s = float(runner.spec.study.heartbeat_interval_s)
        while not runner._stop_heartbeat.wait(interval_s):
            with contextlib.suppress(Exception):  # a lost database: the loop says so
                why = self.exhausted()
                if why is not None:
                    for run in list(runner.running.values()):
                        run.stop_over_budget(why)
                    return


def watch(runner: Any) -> BudgetWatch | None:
    """The :class:`BudgetWatch` of a :class:`~dvt_hpo.study.loop.StudyRunner` whose study is
    open (None without ``study.budget``), attached to its launch gate."""
    spec = runner.spec
    if spec.study.budget is None:
        return None
    stored = runner.storage.get_study_system_attrs(runner.study_id).get(STARTED_ATTR)
    started = float(stored) if stored is not None else time.time()
    budget = BudgetWatch(
        spec.study.budget,
        runner.storage,
        runner.study_id,
        started,
        study_lock=runner.study_lock,
        db=runner.db,
    )
    budget.attach(runner)
    return budget


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
