"""``dvt-hpo status``: where a study stands, read from its database without changing it.

Cheap on large studies (``benchmarks/overheads/status_speed.py``): on RDB storages the counts are one
``GROUP BY`` and the last failures one ordered ``LIMIT`` query, the best trial is Optuna's own
``get_best_trial`` query, and only RUNNING trials and those few failures are loaded as objects.
Optuna's ``get_n_trials`` and ``load_study``'s trial cache would load every trial. Studies
with several objectives or with constraints load their COMPLETE trials once: a Pareto front and
feasibility need every value (:mod:`dvt_hpo.results.front`), which no single query gives.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dvt_hpo.budget.compute import status_line, status_numbers
from dvt_hpo.budget.trials import (
    OVER_BUDGET_ATTR,
    PRIOR_ATTR,
    RETRY_HISTORY_ATTR,
    Attempt,
    uncounted_attempts,
)
from dvt_hpo.config.units import format_bytes
from dvt_hpo.optuna_api.private import trial_id_of
from dvt_hpo.recovery.pause import PausedState, paused_states
from dvt_hpo.recovery.retries import is_paused
from dvt_hpo.results.front import no_feasible_message, select_best
from dvt_hpo.results.outcome import INTERRUPTED, reason_of
from dvt_hpo.store.queries import engine_of, state_counts
from dvt_hpo.store.storage import PAUSED_ATTR
from dvt_hpo.study.messages import fmt_params

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec.model import StudySpec


@dataclass(frozen=True)
class RunningTrial:
    number: int
    elapsed_s: float
    host: str | None
    last_step: int | None
    metric: str
    value: float | None  # the first objective's latest report
    params: dict[str, Any]
    # Every objective's latest report, in ``StudyStatus.metrics`` order; ``None`` for one not
    # reported yet. With several objectives none of them leads, so ``value`` alone misleads.
    values: list[float | None] = field(default_factory=list)
    worker: str | None = None  # the Slurm array task that runs it ("123_4"), if any
    resume_bytes: int | None = None  # trials.resume: the size of its resume state on disk


@dataclass(frozen=True)
class FailedTrial:
    number: int
    reason: str
    finished: str | None  # ISO time
    retry_of: int | None


@dataclass(frozen=True)
class BestTrial:
    number: int
    value: float  # the first objective's
    params: dict[str, Any]
    batch_size: int | None
    values: list[float] = field(default_factory=list)  # every objective's


@dataclass(frozen=True)
class StudyStatus:
    study: str
    storage: str  # redacted
    metric: str
    direction: str
    n_trials: int | None  # the study's budget
    counts: dict[str, int]
    best: BestTrial | None
    running: list[RunningTrial] = field(default_factory=list)
    failures: list[FailedTrial] = field(default_factory=list)  # the last ones, newest first
    metrics: list[str] = field(default_factory=list)  # every objective, in order
    directions: list[str] = field(default_factory=list)
    front: list[BestTrial] = field(default_factory=list)  # several objectives: feasible front
    no_feasible: str | None = None  # why there is no best although trials completed
    pruned: list[FailedTrial] = field(default_factory=list)  # the last pruned, newest first
    # Finished trials that do not count towards n_trials (dvt_hpo.budget.trials), by why.
    not_counted: dict[str, int] = field(default_factory=dict)
    budget: str | None = None  # study.budget spent / total (dvt_hpo.budget.compute)
    budget_numbers: dict[str, Any] | None = None  # the same as numbers, for --json
    # trials.pause: the paused trials whose state is kept (seen from here), with its size.
    paused: list[PausedState] = field(default_factory=list)
    # FAIL trials stopped by Ctrl-C or a signal (user attr status: interrupted): counted in
    # counts["FAIL"], as Optuna records them, but shown apart from the failures, which they
    # are not (the trial's own code did not fail; a rerun retries it).
    n_stopped: int = 0
    stopped: list[FailedTrial] = field(default_factory=list)  # the last ones, newest first

    @property
    def finished(self) -> int:
        """Finished trials that count towards ``n_trials``: what ``run`` counts."""
        done = self.counts["COMPLETE"] + self.counts["PRUNED"] + self.counts["FAIL"]
        return done - sum(self.not_counted.values())

    def to_json(self) -> str:
        data = {**asdict(self), "finished": self.finished}
        # Numbers for a script ({"limits": {"hours": {"spent", "total"}}, "spent"}); the line
        # the text shows beside them.
        data["budget_text"] = data["budget"]
        data["budget"] = data.pop("budget_numbers")
        return json.dumps(data, indent=1, allow_nan=True)


def last_report(trial: optuna.trial.FrozenTrial, metric: str) -> tuple[int | None, float | None]:
    """``(step, value)`` of the trial's latest report of ``metric``: the per-epoch ``history``
    user attr (``{metric: [[step, value], ...]}``) when the runner wrote one, else the
    ``last_metrics`` it stores at each epoch of a multi-objective trial, else Optuna's
    intermediate values (which hold the objective metric only)."""
    attrs = trial.user_attrs
    history = attrs.get("history")
    if isinstance(history, dict) and isinstance(history.get(metric), list) and history[metric]:
        step, value = history[metric][-1]
        last_step = attrs.get("last_step", step)
        return int(last_step), _number(value)
    last = attrs.get("last_metrics")
    if isinstance(last, dict) and metric in last and isinstance(attrs.get("last_step"), int):
        # Several objectives: nothing is reported to Optuna; the runner stores each epoch.
        return attrs["last_step"], _number(last[metric])
    if trial.intermediate_values:
        step = max(trial.intermediate_values)
        return step, _number(trial.intermediate_values[step])
    if isinstance(attrs.get("last_step"), int):
        return attrs["last_step"], None
    return None, None


def _number(value: Any) -> float | None:
    try:
        result = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(result) else result


def _uncounted(storage: Any, study_id: int) -> dict[int, str]:
    """The trials that do not count towards ``n_trials``, by :mod:`dvt_hpo.budget.trials`'s rule.
    On RDB storages two small queries: the trials carrying a retry history or the over-budget
    mark (few), and the numbers of the FAIL trials."""
    from optuna.trial import TrialState

    engine = engine_of(storage)
    if engine is None:
        trials = storage.get_all_trials(study_id, deepcopy=False)
        return uncounted_attempts(
            Attempt(
                t.number,
                t.state.name,
                bool(t.system_attrs.get(OVER_BUDGET_ATTR)),
                tuple(t.system_attrs.get(RETRY_HISTORY_ATTR) or ()),
                prior=bool(t.system_attrs.get(PRIOR_ATTR)),
                paused=is_paused(t),
            )
            for t in trials
        )
    import sqlalchemy

    with engine.connect() as conn:
        marked = conn.execute(
            sqlalchemy.text(
                "SELECT t.number, a.key, a.value_json FROM trial_system_attributes a "
                "JOIN trials t ON t.trial_id = a.trial_id "
                "WHERE t.study_id = :sid AND a.key IN (:retries, :over, :prior, :paused)"
            ),
            {
                "sid": study_id,
                "retries": RETRY_HISTORY_ATTR,
                "over": OVER_BUDGET_ATTR,
                "prior": PRIOR_ATTR,
                "paused": PAUSED_ATTR,
            },
        ).all()
        if not marked:
            return {}
        failed = conn.execute(
            sqlalchemy.text("SELECT number FROM trials WHERE study_id = :sid AND state = :fail"),
            {"sid": study_id, "fail": TrialState.FAIL.name},
        ).all()
    retries: dict[int, tuple[int, ...]] = {}
    over: set[int] = set()
    prior: set[int] = set()
    paused: set[int] = set()
    for number, key, value in marked:
        if key == RETRY_HISTORY_ATTR:
            retries[int(number)] = tuple(int(n) for n in json.loads(value) or ())
        elif key == PAUSED_ATTR:
            if json.loads(value) == int(number):  # its own mark, not one a copy carried
                paused.add(int(number))
        elif json.loads(value):
            (prior if key == PRIOR_ATTR else over).add(int(number))
    fails = {int(n) for (n,) in failed}
    numbers = fails | over | prior | paused | set(retries)
    return uncounted_attempts(
        Attempt(
            n,
            "FAIL" if n in fails else "PRUNED" if n in paused else "OTHER",
            n in over,
            retries.get(n, ()),
            prior=n in prior,
            paused=n in paused,
        )
        for n in numbers
    )


def _interrupted(storage: Any, study_id: int) -> set[int]:
    """The trial ids of the FAIL trials stopped by Ctrl-C or a signal (one query)."""
    from optuna.trial import TrialState

    engine = engine_of(storage)
    if engine is None:
        failed = storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.FAIL,))
        return {trial_id_of(t) for t in failed if t.user_attrs.get("status") == INTERRUPTED}
    import sqlalchemy

    with engine.connect() as conn:
        rows = conn.execute(
            sqlalchemy.text(
                "SELECT t.trial_id FROM trials t JOIN trial_user_attributes a "
                "ON a.trial_id = t.trial_id WHERE t.study_id = :sid AND t.state = :fail "
                "AND a.key = 'status' AND a.value_json = :status"
            ),
            {"sid": study_id, "fail": TrialState.FAIL.name, "status": json.dumps(INTERRUPTED)},
        ).all()
    return {int(trial_id) for (trial_id,) in rows}


def _last_failed(
    storage: Any,
    study_id: int,
    n: int,
    state: str = "FAIL",
    *,
    leave_out: AbstractSet[int] = frozenset(),
) -> list[optuna.trial.FrozenTrial]:
    """The last ``n`` trials that ended in ``state`` (FAIL: over-budget closures and the
    trial ids ``leave_out`` left out)."""
    from optuna.trial import TrialState

    engine = engine_of(storage)
    if engine is None:
        failed = storage.get_all_trials(study_id, deepcopy=False, states=(TrialState[state],))
    else:
        import sqlalchemy

        # Over-budget closures are FAIL too and filtered below: fetch a margin.
        with engine.connect() as conn:
            ids = conn.execute(
                sqlalchemy.text(
                    "SELECT trial_id FROM trials WHERE study_id = :sid AND state = :state "
                    "ORDER BY datetime_complete DESC, number DESC LIMIT :n"
                ),
                {"sid": study_id, "n": 4 * n + len(leave_out), "state": state},
            ).all()
        failed = [storage.get_trial(trial_id) for (trial_id,) in ids if trial_id not in leave_out]
    # A trial closed as over budget is not a failure worth showing.
    failed = [t for t in failed if not t.system_attrs.get(OVER_BUDGET_ATTR)]
    failed = [t for t in failed if trial_id_of(t) not in leave_out]
    failed.sort(key=lambda t: (t.datetime_complete or datetime.min, t.number), reverse=True)
    return failed[:n]


def read_status(
    storage: Any,
    study_id: int,
    spec: StudySpec,
    *,
    n_failures: int = 5,
    n_pruned: int = 3,
    n_stopped: int = 3,
    now: float | None = None,
) -> StudyStatus:
    """The status of study ``study_id`` in ``storage`` (an Optuna storage, not the trial
    cache ``optuna.load_study`` wraps RDB storages in)."""
    from optuna.trial import TrialState

    from dvt_hpo.text.redact import redact_url

    counts = state_counts(storage, study_id)
    not_counted: dict[str, int] = {}
    for why in _uncounted(storage, study_id).values():
        not_counted[why] = not_counted.get(why, 0) + 1

    best: BestTrial | None = None
    front: list[BestTrial] = []
    no_feasible = None
    objective = spec.objective
    if counts["COMPLETE"] and not objective.is_multi and not objective.constraints:
        best = _best_trial(storage.get_best_trial(study_id))
    elif counts["COMPLETE"]:
        # Feasibility and fronts need every complete trial (Optuna's best-trial query knows
        # neither).
        complete = storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.COMPLETE,))
        chosen = select_best(complete, objective.directions)
        if chosen.none_feasible:
            no_feasible = no_feasible_message(
                chosen, spec.study.name, [c.metric for c in objective.constraints]
            )
        elif objective.is_multi:
            front = [_best_trial(t) for t in chosen.trials]
        else:
            best = _best_trial(chosen.trials[0])

    metric = spec.objective.metric
    now = time.time() if now is None else now
    running = []
    for t in storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
        step, value = last_report(t, metric)
        values = [value] + [last_report(t, name)[1] for name in objective.names[1:]]
        start = t.datetime_start.timestamp() if t.datetime_start else now
        host = t.user_attrs.get("host")
        running.append(
            RunningTrial(
                t.number,
                round(now - start, 1),
                host,
                step,
                metric,
                value,
                dict(t.params),
                values,
                t.user_attrs.get("slurm_worker"),
                _resume_bytes(t.user_attrs.get("resume_dir")),
            )
        )
    running.sort(key=lambda r: r.number)

    interrupted = _interrupted(storage, study_id) if counts["FAIL"] else set()
    failures, pruned = (
        [_failed(t) for t in _last_failed(storage, study_id, n, state, leave_out=interrupted)]
        if counts[state]
        else []
        for state, n in (("FAIL", n_failures), ("PRUNED", n_pruned))
    )
    stopped = sorted(
        (storage.get_trial(trial_id) for trial_id in interrupted),
        key=lambda t: (t.datetime_complete or datetime.min, t.number),
        reverse=True,
    )
    return StudyStatus(
        study=spec.study.name,
        storage=redact_url(spec.study.storage),
        metric=metric,
        direction=spec.objective.direction,
        n_trials=spec.study.n_trials,
        counts=counts,
        best=best,
        running=running,
        failures=failures,
        pruned=pruned,
        n_stopped=len(interrupted),
        stopped=[_failed(t) for t in stopped[:n_stopped]],
        metrics=list(objective.names),
        directions=list(objective.directions),
        front=front,
        no_feasible=no_feasible,
        not_counted=not_counted,
        budget=status_line(storage, study_id, spec, now),
        budget_numbers=status_numbers(storage, study_id, spec, now),
        paused=paused_states(spec, storage.get_all_trials(study_id, deepcopy=False))
        if spec.trials.pause
        else [],
    )


def _failed(t: optuna.trial.FrozenTrial) -> FailedTrial:
    return FailedTrial(
        t.number,
        reason_of(t.state.name, t.user_attrs) or "no reason recorded",
        t.datetime_complete.isoformat(timespec="seconds") if t.datetime_complete else None,
        t.user_attrs.get("retry_of"),
    )


def _resume_bytes(folder: Any) -> int | None:
    """The resume state's size (``trials.resume``), read where the trial keeps it: this
    machine when the runs folder is shared (the rule on a cluster), else nothing."""
    if not isinstance(folder, str) or not os.path.isdir(folder):
        return None
    from dvt_hpo.recovery.resume import dir_bytes

    return dir_bytes(folder)


def _best_trial(trial: optuna.trial.FrozenTrial) -> BestTrial:
    bs = trial.user_attrs.get("batch_size")
    values = [float(v) for v in trial.values]
    return BestTrial(
        trial.number, values[0], dict(trial.params), bs if isinstance(bs, int) else None, values
    )


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def _fmt_elapsed(seconds: float) -> str:
    minutes, s = divmod(int(seconds), 60)
    h, m = divmod(minutes, 60)
    return f"{h}:{m:02d}:{s:02d}"


def _count(state: str, n: int, stopped: int) -> str:
    """``3 fail, 1 stopped``: the stopped trials, FAIL to Optuna, apart from the failures."""
    if state != "FAIL" or not stopped:
        return f"{n} {state.lower()}"
    return f"{n - stopped} fail, {stopped} stopped"


def format_status(status: StudyStatus) -> str:
    counts = status.counts
    finished = status.finished
    budget = f"{finished}/{status.n_trials}" if status.n_trials is not None else f"{finished}"
    pairs = zip(
        status.directions or [status.direction], status.metrics or [status.metric], strict=True
    )
    lines = [
        f"study {status.study!r} on {status.storage}: {budget} trials finished, "
        + ", ".join(f"{d} {m}" for d, m in pairs),
        "  "
        + ", ".join(_count(s, n, status.n_stopped) for s, n in counts.items())
        + "".join(f"; {n} {why} (not counted)" for why, n in status.not_counted.items()),
    ]
    if status.budget is not None:
        lines.append(f"  budget: {status.budget}")
    names = status.metrics or [status.metric]
    if status.no_feasible is not None:
        lines.append(f"best trial: none feasible: {status.no_feasible}")
    elif len(names) > 1:
        if status.front:
            lines.append(f"Pareto front ({len(status.front)} trial(s), feasible only):")
        else:
            lines.append("Pareto front: none complete yet")
        for b in status.front:
            values = " ".join(f"{n}={_fmt(v)}" for n, v in zip(names, b.values, strict=False))
            lines.append(f"  trial {b.number}: {values}  {fmt_params(b.params)}")
    elif status.best is not None:
        b = status.best
        batch = f"  batch={b.batch_size}" if b.batch_size else ""
        lines.append(
            f"best trial {b.number}: {status.metric}={_fmt(b.value)}  {fmt_params(b.params)}{batch}"
        )
    else:
        lines.append("best trial: none complete yet")
    if status.running:
        lines.append("running:")
        for r in status.running:
            step = "-" if r.last_step is None else str(r.last_step)
            if len(names) > 1 and r.values:
                reports = " ".join(f"{n}={_fmt(v)}" for n, v in zip(names, r.values, strict=False))
            else:
                reports = f"{r.metric}={_fmt(r.value)}"
            host = r.host or "?"
            if r.worker:
                host += f" (job {r.worker})"
            lines.append(
                f"  trial {r.number:>4}  {_fmt_elapsed(r.elapsed_s)}  {host}  "
                f"epoch {step}  {reports}  {fmt_params(r.params)}"
                + (f"  resume state {format_bytes(r.resume_bytes)}" if r.resume_bytes else "")
            )
    if status.paused:
        total = format_bytes(sum(p.bytes for p in status.paused))
        lines.append(f"paused ({len(status.paused)}, states {total} on disk):")
        for p in status.paused:
            lines.append(
                f"  trial {p.number:>4}  after epoch {p.step}  state {format_bytes(p.bytes)}"
            )
    if status.pruned:
        lines.append("last pruned:")
        for p in status.pruned:
            lines.append(f"  trial {p.number:>4}  {p.finished or '?'}  {p.reason}")
    if status.stopped:
        lines.append("last stopped (Ctrl-C or a signal; a rerun retries them):")
        for f in status.stopped:
            retry = f" (retry of {f.retry_of})" if f.retry_of is not None else ""
            lines.append(f"  trial {f.number:>4}{retry}  {f.finished or '?'}  {f.reason}")
    if status.failures:
        lines.append("last failures:")
        for f in status.failures:
            retry = f" (retry of {f.retry_of})" if f.retry_of is not None else ""
            lines.append(f"  trial {f.number:>4}{retry}  {f.finished or '?'}  {f.reason}")
    return "\n".join(lines)


def show_status(spec: StudySpec, *, as_json: bool = False) -> str:
    from dvt_hpo.cluster.jobs import format_workers, study_workers
    from dvt_hpo.recovery.stopped_nodes import format_stopped, stopped_nodes
    from dvt_hpo.store.opening import StudyAt

    opened = StudyAt.of(spec).load()
    storage, study_id = opened.storage, opened.study_id
    status = read_status(storage, study_id, spec)
    # The workers of the study's Slurm jobs (none unless `dvt-hpo submit` ran).
    by_worker: dict[str, list[int]] = {}
    for r in status.running:
        if r.worker:
            by_worker.setdefault(r.worker, []).append(r.number)
    workers = study_workers(storage, study_id, by_worker)
    # Workers that stopped themselves on a broken node (dvt_hpo.recovery.node_health).
    stopped = stopped_nodes(storage, study_id)
    if as_json:
        data = json.loads(status.to_json())
        data["workers"] = [asdict(w) for w in workers]
        data["stopped_workers"] = [asdict(n) for n in stopped]
        return json.dumps(data, indent=1, allow_nan=True)
    return "\n".join([format_status(status), *format_workers(workers), *format_stopped(stopped)])


__all__ = [
    "BestTrial",
    "FailedTrial",
    "RunningTrial",
    "StudyStatus",
    "format_status",
    "last_report",
    "read_status",
    "show_status",
]
