"""``trials.pause`` in the loop: before a launch, continue the paused trial the promotion rule
picks; after a pause, keep the disk budget; when the study is over, delete every paused state.

The decisions are :mod:`dvt_hpo.recovery.pause`'s; this module applies them at the loop's three
moments and says what it did in one line each (docs/pause.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dvt_hpo.recovery import pause
from dvt_hpo.results.outcome import trial_state

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.budget.ledger import Budget
    from dvt_hpo.stopping.plateau import PlateauWatch
    from dvt_hpo.study.handle import StudyHandle

__all__ = ["PauseKeeper"]

Lock = Callable[[], contextlib.AbstractContextManager[Any]]


class PauseKeeper:
    """The loop's side of ``trials.pause`` for one study."""

    def __init__(self, handle: StudyHandle, retry_lock: Lock, out: Callable[[str], None]):
        self.handle = handle
        self.paused = pause.Paused(handle.spec)
        self.retry_lock = retry_lock
        self.out = out

    @classmethod
    def of(
        cls, handle: StudyHandle, retry_lock: Lock, out: Callable[[str], None]
    ) -> PauseKeeper | None:
        """The keeper of a study with ``trials.pause`` on, else None."""
        return cls(handle, retry_lock, out) if handle.spec.trials.pause else None

    @property
    def _study(self) -> optuna.Study:
        return self.handle.study

    def continue_one(self) -> bool:
        """Before a launch with no WAITING trial: enqueue the continuation of the paused
        trial the rule picks, if any (the launch then takes it); True when one was."""
        with self.handle.lock:
            number = self.handle.db(
                lambda: self.paused.continue_paused(self._study, self.retry_lock),
                "choosing a paused trial",
            )
        if number is None:
            return False
        self.out(f"trial {number} (paused) continues: it ranks in the top of its step now")
        return True

    def after_pause(self) -> None:
        """After a trial was paused: ``trials.paused_max`` / ``paused_max_gb``."""
        spec = self.handle.spec.trials
        with self.handle.lock:
            evicted = self.handle.db(
                lambda: self.paused.enforce_limits(self._study, self.retry_lock),
                "keeping the paused states' budget",
            )
        if evicted:
            limits = ", ".join(
                f"{name}={value:g}"
                for name, value in (
                    ("trials.paused_max", spec.paused_max),
                    ("trials.paused_max_gb", spec.paused_max_gb),
                )
                if value is not None
            )
            shown = ", ".join(str(n) for n in evicted)
            self.out(
                f"paused state of trial(s) {shown} evicted ({limits}): the least promising; "
                "they stay pruned"
            )

    def study_over(self, budget: Budget, *, plateau: PlateauWatch | None) -> None:
        """After a run that was not stopped: when the study is over for every worker
        (``study.n_trials`` used with nothing left to continue, ``study.budget`` spent, the
        plateau), every paused state goes, unless a trial of another worker still runs or
        waits (the last worker to end deletes them)."""
        n_trials = self.handle.spec.study.n_trials
        used_up = n_trials is not None and budget.used >= n_trials and not budget.waiting
        spent = self.handle.budget is not None and self.handle.budget.exhausted() is not None
        if not (used_up or spent or (plateau is not None and plateau.reached)):
            return
        states = (trial_state("RUNNING"), trial_state("WAITING"))
        with self.handle.lock:
            if self._study.get_trials(deepcopy=False, states=states):
                return
            trials = self._study.get_trials(deepcopy=False)
        gone = pause.discard_all(self.handle.spec, trials)
        if gone:
            self.out(f"the study is over: deleted the paused state of {len(gone)} trial(s)")
