"""What every peer runner of the search-efficiency benchmark shares: the tasks and seeds, the
epoch budget counted the same way for every tool, and the result files in
``search_efficiency``'s ``StudyResult`` format.

Pure Python (no Ray, no Syne Tune, no surrogate): the runners (``peer_ray.py``,
``peer_syne.py``) run in virtualenvs of their own, and the core's tests check this module.

The budget, as ``search_efficiency`` counts it: every epoch any trial trains is one of the
study's ``BUDGET_EPOCHS``; once they are spent the study stops, and a trial still running then
is not complete (its value never counts). Each epoch a tool reports goes through
:meth:`Ledger.result` in the order the tool sees it (one trial at a time: the trials' order; 4
at a time: the order the epochs end, from the surrogate's predicted epoch times), and the
ledger refuses every epoch past the budget, however late the tool stops.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import result_files  # stdlib only, beside this file

MAX_EPOCHS = 52  # lcbench_surrogate.MAX_EPOCHS; not imported, so this module needs no numpy
FULL_BUDGET = 30  # search_efficiency.FULL_BUDGET: full trainings' worth of epochs per study
BUDGET_EPOCHS = FULL_BUDGET * MAX_EPOCHS
# 8 of the 34 tasks spread over the surrogate's task order: every 4th, the first 8
# (``search_efficiency.py --task-step 4`` less its 9th; tests/benchmarks/search/test_peer_common.py
# checks it against the surrogate's list).
PEER_TASKS = ("3945", "126026", "167149", "167181", "167200", "168331", "168910", "189866")
PEER_SEEDS = (0, 1, 2)
CONCURRENCY = (1, 4)
# Cells of the peers: runner module -> cell names (the suffix "@4" says 4 trials at a time).
RAY_CELLS = ("ray-asha-random", "ray-asha-optuna")
SYNE_CELLS = ("syne-asha", "syne-bohb", "syne-mobster")
# The kept results, packed (result_files.py); a runner writes new ones into RUNS, one file per
# study, and `result_files.py pack` turns that folder into the packed file.
RESULTS = Path(__file__).resolve().parent / "results" / "peers.jsonl.gz"
RUNS = Path(__file__).resolve().parent / "results" / "peers"
# What each peer's cell runs, recorded in its results as the sampler and pruner (the versions
# and settings: docs/performance/peers.md).
PEER_ALGORITHMS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "ray-asha-random": ({"kind": "ray: random"}, {"kind": "ray: ASHAScheduler"}),
    "ray-asha-optuna": ({"kind": "ray: OptunaSearch (TPE)"}, {"kind": "ray: ASHAScheduler"}),
    "syne-asha": (
        {"kind": "syne-tune: random"},
        {"kind": "syne-tune: HyperbandScheduler (stopping)"},
    ),
    "syne-bohb": (
        {"kind": "syne-tune: BOHB (KDE)"},
        {"kind": "syne-tune: HyperbandScheduler (stopping)"},
    ),
    "syne-mobster": (
        {"kind": "syne-tune: MOBSTER (GP)"},
        {"kind": "syne-tune: HyperbandScheduler (stopping)"},
    ),
}


def cell_name(peer: str, workers: int) -> str:
    """``ray-asha-random`` at one trial at a time, ``ray-asha-random@4`` at 4."""
    return peer if workers == 1 else f"{peer}@{workers}"


def epoch_seconds(cumulative: list[float], floor: float = 1e-3) -> list[float]:
    """Each epoch's duration from the surrogate's cumulative training time (its ``time``
    output), at least ``floor``: the surrogate's curve is not always increasing, and a simulator
    or a sleep needs a positive duration."""
    out, before = [], 0.0
    for now in cumulative:
        out.append(max(floor, float(now) - before))
        before = max(before, float(now))
    return out


@dataclass
class Ledger:
    """The study's epochs as the tool reports them, cut at the budget."""

    budget: int = BUDGET_EPOCHS
    max_epochs: int = MAX_EPOCHS
    spent: int = 0
    started: list[str] = field(default_factory=list)  # trial ids, in the order they first report
    epochs: dict[str, int] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)  # the last counted value
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    ended: dict[str, str] = field(default_factory=dict)  # id -> state, in the order they end

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.budget

    def result(self, trial: str, epoch: int, value: float, config: dict[str, Any]) -> bool:
        """Count one reported epoch; False (not counted) once the budget is spent, or for an
        epoch that is not the trial's next one (a tool repeating a report)."""
        if self.exhausted or trial in self.ended or epoch != self.epochs.get(trial, 0) + 1:
            return False
        if trial not in self.epochs:
            self.started.append(trial)
            self.configs[trial] = dict(config)
        self.spent += 1
        self.epochs[trial] = epoch
        self.values[trial] = float(value)
        if epoch >= self.max_epochs:
            self.ended[trial] = "COMPLETE"
        return True

    def stopped(self, trial: str) -> None:
        """The tool ended ``trial`` (its scheduler stopped it, or it finished). Once the budget
        is spent the tool stops every running trial: those are cut, not pruned."""
        if trial in self.epochs and trial not in self.ended and not self.exhausted:
            self.ended[trial] = "PRUNED"

    def trials(self, seconds: Callable[[dict[str, Any], int], float]) -> list[dict[str, Any]]:
        """``search_efficiency.Trial`` fields of every trial that trained an epoch: those that
        ended, in the order they ended, then those the budget cut (``RUNNING``, no value);
        ``number`` is the order they started. ``seconds(config, epochs)``: the surrogate's
        training time of those epochs."""
        order = [*self.ended, *(t for t in self.started if t not in self.ended)]
        number = {t: i for i, t in enumerate(self.started)}
        out = []
        for t in order:
            state = self.ended.get(t, "RUNNING")
            out.append(
                {
                    "number": number[t],
                    "state": state,
                    "epochs": self.epochs[t],
                    "value": self.values[t] if state == "COMPLETE" else None,
                    "time_s": float(seconds(self.configs[t], self.epochs[t])),
                }
            )
        return out


@dataclass(frozen=True)
class NewTrial:
    """A trial a tool starts, with what the surrogate says it will report."""

    trial: str
    config: dict[str, Any]
    values: Sequence[float]  # the metric at epochs 1..MAX_EPOCHS
    seconds: Sequence[float]  # each epoch's duration (:func:`epoch_seconds`)


def simulate(
    workers: int,
    start: Callable[[], NewTrial],
    result: Callable[[str, int, float], bool],
    ledger: Ledger,
) -> None:
    """Run a study in simulated time: ``workers`` trials at a time, each epoch ending after its
    predicted duration, the epochs of all trials handled in the order they end (ties: in the
    order they were scheduled). ``start()`` asks the tool for a trial when a worker is free;
    ``result(trial, epoch, value)`` tells the tool one epoch and returns whether the tool stops
    the trial there (a trial stops after its last epoch anyway). Ends when the ledger's budget
    is spent."""
    order = itertools.count()
    pending: list[tuple[float, int, int, NewTrial]] = []

    def launch(now: float) -> None:
        new = start()
        heapq.heappush(pending, (now + new.seconds[0], next(order), 1, new))

    for _ in range(workers):
        launch(0.0)
    while pending and not ledger.exhausted:
        now, _, epoch, new = heapq.heappop(pending)
        value = float(new.values[epoch - 1])
        ledger.result(new.trial, epoch, value, new.config)
        if ledger.exhausted:
            break
        if result(new.trial, epoch, value) or epoch >= len(new.values):
            ledger.stopped(new.trial)
            launch(now)
        else:
            heapq.heappush(pending, (now + new.seconds[epoch], next(order), epoch + 1, new))


def study_result(
    cell: str, task: str, seed: int, ledger: Ledger, wall_s: float, trials: list[dict[str, Any]]
) -> dict[str, Any]:
    """The JSON of one study, as ``search_efficiency.save`` writes a ``StudyResult``."""
    return {
        "cell": cell,
        "task": str(task),
        "seed": int(seed),
        "budget_epochs": ledger.budget,
        "wall_s": float(wall_s),
        "exit_code": 0,
        "trials": trials,
        "engine": "peer",
        # Trials at a time, from the cell's "@N"; their epochs ran in simulated time.
        "parallel": int(cell.rsplit("@", 1)[1]) if "@" in cell else 1,
        "sleep_scale": 0.0,
        "sampler": PEER_ALGORITHMS[cell.split("@")[0]][0],
        "pruner": PEER_ALGORITHMS[cell.split("@")[0]][1],
        "commit": result_files.commit(),
    }


def result_path(results: Path, cell: str, task: str, seed: int) -> Path:
    """Where ``search_efficiency`` keeps a study's result (``result_path`` there)."""
    return results / cell / f"{task}-{seed}.json"


def save(results: Path, result: dict[str, Any]) -> Path:
    from dvt_hpo.atomic import write_text_atomic

    path = result_path(results, result["cell"], result["task"], result["seed"])
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(result))
    return path


def todo(
    cells: list[str], tasks: list[str], seeds: list[int], results: Path
) -> list[tuple[str, str, int]]:
    """The (cell, task, seed) studies missing from ``results``; seeds outermost, so a run cut
    short still has every cell on the same tasks for its first seeds."""
    return [
        (c, t, s)
        for s in seeds
        for t in tasks
        for c in cells
        if not result_path(results, c, t, s).exists()
    ]


def space_bounds(dimensions: Any) -> list[tuple[str, str, float, float, bool]]:
    """(name, kind, low, high, log) of ``lcbench_surrogate.search_space``'s dimensions, the
    study's search space that each peer translates into its own."""
    return [
        (str(d["name"]), str(d["kind"]), d["low"], d["high"], bool(d["log"])) for d in dimensions
    ]
