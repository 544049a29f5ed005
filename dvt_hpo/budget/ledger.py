"""The ledger of ``study.n_trials``: how many trials count, which are waiting, run elsewhere or
wait for their retry copy, read incrementally through the study's storage (finished trials once,
unfinished ones again: :class:`~dvt_hpo.store.trial_reader.TrialReader`) so that every worker
and every resume shares one figure. What counts is :mod:`dvt_hpo.budget.trials`'s rule; the
loop asks before each launch and applies the answer (:class:`Budget`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dvt_hpo.budget.trials import (
    OVER_BUDGET_ATTR,
    PRIOR_ATTR,
    RETRY_ATTR,
    RETRY_HISTORY_ATTR,
    uncounted,
    within_retries,
)
from dvt_hpo.store.queries import trial_marks
from dvt_hpo.store.storage import MACHINE_ATTR, MACHINE_RETRIES_ATTR, PAUSED_ATTR, PAUSES_ATTR
from dvt_hpo.store.trial_reader import TrialReader

if TYPE_CHECKING:
    import optuna

__all__ = ["Budget", "Ledger"]

# The system attributes the ledger reads of every trial.
_LEDGER_ATTRS = (
    OVER_BUDGET_ATTR,
    RETRY_ATTR,
    RETRY_HISTORY_ATTR,
    MACHINE_ATTR,
    MACHINE_RETRIES_ATTR,
    PRIOR_ATTR,
    PAUSED_ATTR,
    PAUSES_ATTR,
)
# What the ledger reads of a trial: its state, id and system attrs.
_Marks = tuple[str, int, Mapping[str, Any]]


@dataclass(frozen=True)
class _Entry:
    trial_id: int
    state: str
    over_budget: bool
    retry: bool = False  # failed (or being failed) for a retry: RETRY_ATTR is its number
    chain: int = 0  # copies before it in its retry chain
    machine: bool = False  # failed of the machine (MACHINE_ATTR)
    machine_chain: int = 0  # copies before it made for machine failures
    pauses: int = 0  # continuations of paused attempts before it (trials.pause)


@dataclass(frozen=True)
class Budget:
    used: int  # trials that count towards study.n_trials
    waiting: int  # enqueued retries (counted already; run even when the budget is used up)
    foreign_running: int  # RUNNING trials of other workers (or of a dead one, not stale yet)
    # Attempts failed for a retry whose copy is not enqueued yet (counted in ``used``: the
    # copy takes their place); the sweep enqueues them, so they are work left to do.
    pending: int = 0

    def all_asked(self, n_trials: int | None) -> bool:
        """Whether ``study.n_trials`` allows no new trial (enqueued retries still run)."""
        return n_trials is not None and self.used >= n_trials and not self.waiting

    def nothing_left(self, n_trials: int | None) -> bool:
        """Whether a run has nothing to do: every trial asked and none running or pending
        elsewhere."""
        return self.all_asked(n_trials) and not self.foreign_running and not self.pending


class Ledger:
    """The study's trials as far as the budget is concerned, read incrementally
    (:class:`~dvt_hpo.store.trial_reader.TrialReader`).

    Counted: every trial except FAILs that a retry superseded (the copy counts instead) and
    trials closed as over budget.
    """

    def __init__(
        self, study: optuna.Study, storage: Any, study_id: int, *, max_retries: int = 0
    ) -> None:
        self._study = study
        self._max_retries = max_retries
        self._storage = storage
        self._study_id = study_id
        self._entries: dict[int, _Entry] = {}
        self._reader: TrialReader[_Marks] = TrialReader(
            storage,
            study_id,
            first=self._read_all,
            one=self._read,
            finished=lambda marks: marks[0] not in ("WAITING", "RUNNING"),
        )
        self._failed: set[int] = set()
        self._over_budget: set[int] = set()
        self._prior: set[int] = set()  # copied from an earlier study (warm_start)
        self._paused: set[int] = set()  # PRUNED with their state kept (trials.pause)
        self._superseded_by: dict[int, int] = {}  # FAIL number -> first copy that retries it
        self._known: optuna.trial.FrozenTrial | None = None
        self._told: dict[int, optuna.trial.FrozenTrial] = {}  # finished, not recorded yet

    def refresh(self, known: optuna.trial.FrozenTrial | None = None) -> None:
        """Read what changed; ``known``: a trial the caller has just read under the study lock
        (one of its own, RUNNING), used as it is rather than read again."""
        self._known = known
        for number, (state, trial_id, system_attrs) in self._reader.read():
            self._record(number, trial_id, state, system_attrs)

    def told(self, trial: optuna.trial.FrozenTrial) -> None:
        """One of this worker's trials as its tell returned it: finished, so what the ledger
        reads of it (state, retry and budget marks) no longer changes; the next refresh
        records it as it is rather than reading it again."""
        if trial.state.is_finished():
            self._told[trial.number] = trial

    def _read_all(self) -> Iterator[tuple[int, int, _Marks]]:
        # A worker joining a long study reads it in two queries, not two per trial (20,000
        # trials on PostgreSQL took minutes one by one).
        for mark in trial_marks(self._storage, self._study_id, _LEDGER_ATTRS):
            yield mark.number, mark.trial_id, (mark.state, mark.trial_id, mark.system_attrs)

    def _read(self, number: int, trial_id: int) -> _Marks:
        known = self._known
        trial = self._told.pop(number, None)
        if trial is None:
            trial = known if known and known.number == number else self._storage.get_trial(trial_id)
        return trial.state.name, trial_id, trial.system_attrs

    def _record(
        self, number: int, trial_id: int, state: str, system_attrs: Mapping[str, Any]
    ) -> None:
        # Optuna's retry callback keeps a copy's history under this key (retry_history()).
        history = list(system_attrs.get(RETRY_HISTORY_ATTR) or ())
        entry = _Entry(
            trial_id,
            state,
            bool(system_attrs.get(OVER_BUDGET_ATTR)),
            retry=system_attrs.get(RETRY_ATTR) == number,
            chain=len(history),
            machine=bool(system_attrs.get(MACHINE_ATTR)),
            machine_chain=int(system_attrs.get(MACHINE_RETRIES_ATTR) or 0),
            pauses=int(system_attrs.get(PAUSES_ATTR) or 0),
        )
        if number not in self._entries:
            # A copy's history is written when it is enqueued and never changes.
            for earlier in history:
                self._superseded_by.setdefault(earlier, number)
        self._entries[number] = entry
        if state == "FAIL":
            self._failed.add(number)
        if entry.over_budget:
            self._over_budget.add(number)
        if system_attrs.get(PRIOR_ATTR):
            self._prior.add(number)
        if state == "PRUNED" and system_attrs.get(PAUSED_ATTR) == number:
            self._paused.add(number)

    def used(self, below: int | None = None) -> int:
        """Trials that count, among those numbered below ``below`` (all by default); a FAIL
        counts as superseded only by a copy numbered below ``below`` too."""
        limit = len(self._entries) if below is None else min(below, len(self._entries))
        gone = uncounted(
            self._failed,
            self._over_budget,
            self._superseded_by,
            below=limit,
            prior=self._prior,
            paused=self._paused,
        )
        return limit - len(gone)

    def budget(self, is_ours: Callable[[int], bool]) -> Budget:
        waiting = foreign = 0
        for number in self._reader.unfinished:
            state = self._entries[number].state
            if state == "WAITING":
                waiting += 1
            elif state == "RUNNING" and not is_ours(number):
                foreign += 1
        return Budget(self.used(), waiting, foreign, len(self.pending()))

    def pending(self) -> list[int]:
        """The numbers :func:`pending_retries` would give, from what was read last."""
        return [
            n
            for n in sorted(self._failed)
            if self._entries[n].retry
            and n not in self._superseded_by
            and within_retries(
                copies=self._entries[n].chain,
                machine_copies=self._entries[n].machine_chain,
                machine=self._entries[n].machine,
                max_retries=self._max_retries,
                pauses=self._entries[n].pauses,
            )
        ]
