"""A study's trials read incrementally: finished trials never change, so each is read once; only
the unfinished ones are read again, and new ones are found by asking for the next number until
the storage has none (trial numbers are dense: 0, 1, ...).

Both ledgers read through it: the count of ``study.n_trials`` (:mod:`dvt_hpo.budget.ledger`,
which reads its first pass in two SQL queries) and the compute spent against ``study.budget``
(:mod:`dvt_hpo.budget.compute`). Each says how it reads a trial and whether what it read is
finished.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

__all__ = ["TrialReader"]

T = TypeVar("T")


class TrialReader(Generic[T]):
    """Which trials of one study changed since the last :meth:`read`."""

    def __init__(
        self,
        storage: Any,
        study_id: int,
        *,
        first: Callable[[], Iterable[tuple[int, int, T]]],
        one: Callable[[int, int], T],
        finished: Callable[[T], bool],
    ) -> None:
        """``first()``: every trial at the first read, as (number, trial id, what), in number
        order; ``one(number, trial_id)``: one trial read again; ``finished(what)``: whether it
        can no longer change."""
        self._storage = storage
        self._study_id = study_id
        self._first = first
        self._one = one
        self._finished = finished
        self._ids: dict[int, int] = {}  # number -> trial id, every trial read
        self._unfinished: set[int] = set()

    @property
    def count(self) -> int:
        """Trials read so far (numbers 0 .. count - 1)."""
        return len(self._ids)

    @property
    def unfinished(self) -> frozenset[int]:
        """The numbers of the trials that were unfinished when last read."""
        return frozenset(self._unfinished)

    def _note(self, number: int, trial_id: int, what: T, out: list[tuple[int, T]]) -> None:
        self._ids[number] = trial_id
        if self._finished(what):
            self._unfinished.discard(number)
        else:
            self._unfinished.add(number)
        out.append((number, what))

    def read(self) -> list[tuple[int, T]]:
        """What may have changed since the last read, as (number, what): at the first read
        every trial (only the dense prefix of numbers: a trial created during the read is found
        by the reads that follow), then the unfinished ones again and the new ones."""
        out: list[tuple[int, T]] = []
        if not self._ids:
            for number, trial_id, what in self._first():
                if number != len(self._ids):
                    break
                self._note(number, trial_id, what, out)
        else:
            for number in sorted(self._unfinished):
                self._note(number, self._ids[number], self._one(number, self._ids[number]), out)
        number = len(self._ids)
        while True:
            try:
                trial_id = self._storage.get_trial_id_from_study_id_trial_number(
                    self._study_id, number
                )
            except KeyError:
                return out
            self._note(number, trial_id, self._one(number, trial_id), out)
            number += 1
