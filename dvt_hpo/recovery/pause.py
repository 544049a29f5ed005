"""``trials.pause`` on the orchestrator side: which paused trial continues, which paused state
is evicted, and the states deleted when the study ends (docs/pause.md).

A paused trial is an attempt the pruner stopped before its last epoch with ``trials.pause`` on:
told PRUNED (it did stop; ``best`` and Optuna never see an unfinished curve as a result), marked
:data:`~dvt_hpo.store.storage.PAUSED_ATTR` (its own number) before the tell, its resume folder
kept (:mod:`dvt_hpo.recovery.resume`). It continues as the retry copies of interrupted attempts
do: a WAITING copy of its params enqueued through Optuna's retry callback, whose
``retry_history`` names it, so the copy's resume plan finds the chain's folder, splices the
chain's curve in front of its own reports (one curve, no step twice) and resumes from the state.
The copy supersedes the paused attempt in ``study.n_trials`` (:mod:`dvt_hpo.budget.trials`);
its epochs count in ``study.budget`` as any attempt's.

Which paused trial continues is :func:`dvt_hpo.sampling.promotion.choose` over one curve per
chain; the copy is enqueued under the study's retry lock after reading the trials again, so two
workers racing for one paused trial enqueue one copy, and Optuna hands a WAITING trial to one
worker only. This module answers and deletes resume folders (its own resource); the loop asks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dvt_hpo.atomic import read_json
from dvt_hpo.recovery import resume, retries
from dvt_hpo.sampling.promotion import ChainCurve, choose, eta_of, eviction_order
from dvt_hpo.store.storage import PAUSED_ATTR, retry_callback
from dvt_hpo.wire.trial_dir import ResumeDir

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec.model import StudySpec

__all__ = [
    "Paused",
    "PausedState",
    "chain_curves",
    "continue_paused",
    "discard_all",
    "enforce_limits",
    "mark",
    "paused_states",
]

Lock = Callable[[], contextlib.AbstractContextManager[Any]]
_GB = 1e9


@dataclass(frozen=True)
class PausedState:
    """One paused trial whose state is kept: what ``status`` shows."""

    number: int  # the paused attempt
    chain: int  # its chain's first attempt (the resume folder's number)
    step: int  # the last step it reported
    bytes: int  # its resume folder's size


class Paused:
    """The paused trials of one study file (its runs folder, its fingerprint rule, its
    objective's direction and the pruner's reduction factor)."""

    def __init__(self, spec: StudySpec) -> None:
        self.spec = spec
        self.maximize = spec.objective.direction == "maximize"
        self.eta = eta_of(spec.study.pruner.kind, spec.study.pruner.kwargs)

    def usable(self, trial: optuna.trial.FrozenTrial) -> bool:
        """Whether the paused ``trial``'s state is there and belongs to it as the study file
        says now (a changed space or trainer config makes it someone else's)."""
        folder = ResumeDir.of(self.spec.trials.runs_dir, resume.root_number(trial))
        chain = read_json(folder.chain)
        return isinstance(chain, dict) and chain.get("fingerprint") == resume.fingerprint(
            self.spec, trial.params
        )

    def continue_paused(self, study: optuna.Study, lock: Lock) -> int | None:
        """:func:`continue_paused` for this study file."""
        return continue_paused(
            study, maximize=self.maximize, eta=self.eta, lock=lock, usable=self.usable
        )

    def enforce_limits(self, study: optuna.Study, lock: Lock) -> list[int]:
        """:func:`enforce_limits` for this study file."""
        trials = self.spec.trials
        if trials.paused_max is None and trials.paused_max_gb is None:
            return []
        with lock():
            return enforce_limits(
                self.spec,
                study.get_trials(deepcopy=False),
                maximize=self.maximize,
                eta=self.eta,
                max_count=trials.paused_max,
                max_bytes=None if trials.paused_max_gb is None else trials.paused_max_gb * _GB,
            )


def mark(storage: Any, trial_id: int) -> None:
    """Mark a RUNNING attempt paused (its own number), before it is told PRUNED."""
    storage.set_trial_system_attr(trial_id, PAUSED_ATTR, storage.get_trial_number_from_id(trial_id))


def _latest(trials: Iterable[optuna.trial.FrozenTrial]) -> dict[int, optuna.trial.FrozenTrial]:
    """Each chain's latest attempt, by the chain's first attempt's number."""
    latest: dict[int, optuna.trial.FrozenTrial] = {}
    for trial in trials:
        root = resume.root_number(trial)
        if root not in latest or trial.number > latest[root].number:
            latest[root] = trial
    return latest


def chain_curves(
    trials: list[optuna.trial.FrozenTrial],
    usable: Callable[[optuna.trial.FrozenTrial], bool] = lambda _t: True,
) -> tuple[list[ChainCurve], dict[int, optuna.trial.FrozenTrial]]:
    """One curve per chain (the union of its attempts' reports, a later attempt's value of a
    step winning), paused where the chain's latest attempt is paused with a ``usable`` state;
    and the paused attempts by chain. Trials copied from an earlier study have no curve here."""
    values: dict[int, dict[int, float]] = {}
    for trial in sorted(trials, key=lambda t: t.number):
        if trial.state.name == "WAITING":
            continue
        values.setdefault(resume.root_number(trial), {}).update(trial.intermediate_values)
    paused = {
        root: t
        for root, t in _latest(trials).items()
        if retries.is_paused(t) and t.intermediate_values and usable(t)
    }
    curves = [
        ChainCurve(
            root,
            curve,
            paused_at=max(paused[root].intermediate_values) if root in paused else None,
        )
        for root, curve in values.items()
    ]
    return curves, paused


def continue_paused(
    study: optuna.Study,
    *,
    maximize: bool,
    eta: float,
    lock: Lock,
    usable: Callable[[optuna.trial.FrozenTrial], bool] = lambda _t: True,
) -> int | None:
    """Enqueue the continuation of the paused trial the promotion rule picks now, if any; the
    paused trial's number. Read again under ``lock``: a copy another worker enqueued makes the
    trial its latest attempt, so it is no longer paused here."""
    with lock():
        curves, paused = chain_curves(study.get_trials(deepcopy=False), usable)
        if not paused:
            return None
        chain = choose(curves, maximize=maximize, eta=eta)
        if chain is None:
            return None
        trial = paused[chain]
        retry_callback(None)(study, trial)
    return trial.number


def paused_states(spec: StudySpec, trials: list[optuna.trial.FrozenTrial]) -> list[PausedState]:
    """The paused trials whose resume folder is there, with its size (``status``)."""
    out: list[PausedState] = []
    for root, trial in chain_curves(trials)[1].items():
        folder = resume.chain_dir(spec, root)
        if folder.is_dir():
            step = max(trial.intermediate_values)
            out.append(PausedState(trial.number, root, step, resume.dir_bytes(folder)))
    return sorted(out, key=lambda p: p.number)


def enforce_limits(
    spec: StudySpec,
    trials: list[optuna.trial.FrozenTrial],
    *,
    maximize: bool,
    eta: float,
    max_count: int | None,
    max_bytes: float | None,
) -> list[int]:
    """Evict paused states, the least promising first, until at most ``max_count`` are kept
    and they hold at most ``max_bytes``; the numbers of the paused trials evicted (they stay
    PRUNED at their last report)."""
    curves, paused = chain_curves(trials)
    sizes = {
        root: resume.dir_bytes(resume.chain_dir(spec, root))
        for root in paused
        if resume.chain_dir(spec, root).is_dir()
    }
    evicted: list[int] = []
    for root in eviction_order(curves, maximize=maximize, eta=eta):
        if root not in sizes:
            continue
        over_count = max_count is not None and len(sizes) > max_count
        over_bytes = max_bytes is not None and sum(sizes.values()) > max_bytes
        if not (over_count or over_bytes):
            break
        resume.discard(resume.chain_dir(spec, root))
        sizes.pop(root, None)
        evicted.append(paused[root].number)
    return evicted


def discard_all(spec: StudySpec, trials: list[optuna.trial.FrozenTrial]) -> list[int]:
    """The study ended: every paused state goes; the numbers of the paused trials whose state
    was there."""
    gone: list[int] = []
    for root, trial in chain_curves(trials)[1].items():
        folder = resume.chain_dir(spec, root)
        if folder.exists():
            resume.discard(folder)
            gone.append(trial.number)
    return sorted(gone)
