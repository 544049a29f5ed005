"""``trials.resume`` on the orchestrator side: one resume folder per attempt chain.

An interrupted trial's retry copy continues where it stopped (docs/resume.md). The folder is
``<trials.runs_dir>/resume/trial-NNNN`` where NNNN is the number of the chain's ORIGINAL
attempt (the first of Optuna's ``retry_history``), so every copy of a copy finds it. It holds:

- ``chain.json``: the fingerprint of the params, the trainer config and the search space
  (and the study's name) the state belongs to; a copy whose fingerprint differs (the study
  file changed) wipes the folder instead of loading it;
- ``curve.json``: every report of the chain so far (this module writes it on each report, so
  it survives a ``kill -9`` of the worker): the copy's stored curve is the chain's reports
  before its own first report, then its own, never a step twice;
- ``state/``: the trainer's (``ctx.resume_dir``; ``{resume_dir}`` and ``$DVT_HPO_RESUME_DIR``
  for a command trainer), latest only.

The folder is kept only while a copy will continue it: whoever records how an attempt ended
(the worker, or the sweep that fails a stale one) deletes it unless the attempt was
interrupted and its chain has a retry left. A copy of an attempt that failed by itself (a
``--retry-failed`` copy) never uses it. This module imports no torch; ``run`` below is a :class:`~dvt_hpo.study.trial_run.TrialRun`
(not imported: it imports this module).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dvt_hpo.atomic import read_json, write_json_atomic
from dvt_hpo.optuna_api.private import study_id_of
from dvt_hpo.recovery import retries
from dvt_hpo.sampling import space
from dvt_hpo.wire.payload import ResumePayload

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.results.outcome import Outcome
    from dvt_hpo.studyfile import StudySpec

__all__ = [
    "CHAIN_FILE",
    "CURVE_FILE",
    "RESUME_FOLDER",
    "ResumePlan",
    "after_sweep",
    "closed_unrun",
    "before_report",
    "chain_dir",
    "dir_bytes",
    "discard",
    "end_attrs",
    "fingerprint",
    "on_end",
    "prepare",
    "resume_root",
    "root_number",
    "sweep_hook",
]

RESUME_FOLDER = "resume"
CHAIN_FILE = "chain.json"
CURVE_FILE = "curve.json"
STATE_FOLDER = "state"
_SAVED_FILE = "saved.json"  # written by dvt_hpo.trial.resume_state (ctx.save_state)


def resume_root(spec: StudySpec) -> Path:
    return spec.trials.runs_dir / RESUME_FOLDER


def chain_dir(spec: StudySpec, root: int) -> Path:
    return resume_root(spec) / f"trial-{root:04d}"


def root_number(trial: optuna.trial.FrozenTrial) -> int:
    """The number of the first attempt of ``trial``'s retry chain (its own when it is one)."""
    history = retries.retry_history(trial)
    return history[0] if history else trial.number


def fingerprint(spec: StudySpec, params: dict[str, Any]) -> str:
    """What a state belongs to: the study, the params, the trainer (its config before the
    per-trial folders, its entry point or command) and the search space."""
    trainer = spec.trainer
    described = {
        "study": spec.study.name,
        "params": params,
        "config": space.apply(trainer.config, spec.search_space, params),
        "entrypoint": trainer.entrypoint,
        "command": list(trainer.command) if trainer.command is not None else None,
        "space": space.space_signature(spec.search_space),
    }
    text = json.dumps(described, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def dir_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes of the files under ``path`` (0 when it is missing): ``status`` shows it."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # replaced or removed while walking
                total += os.path.getsize(os.path.join(root, name))
    return total


def discard(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _curve(path: Path) -> list[tuple[int, dict[str, float]]]:
    data = read_json(path)
    if not isinstance(data, list):
        return []
    curve: list[tuple[int, dict[str, float]]] = []
    for point in data:
        if (
            isinstance(point, list)
            and len(point) == 2
            and isinstance(point[0], int)
            and isinstance(point[1], dict)
        ):
            curve.append((point[0], {str(k): float(v) for k, v in point[1].items()}))
    return curve


@dataclass
class ResumePlan:
    """One trial's resume folder and what its copy continues from."""

    root: int
    dir: Path
    fingerprint: str
    every_s: float
    attempt: int
    chain_length: int  # attempts before this one in its chain
    expect: bool  # a state is there to continue from
    earlier: list[tuple[int, dict[str, float]]] = field(default_factory=list)  # the chain's curve
    spliced: int | None = None  # reports taken from the chain (set at the first own report)
    redone: int = 0  # reports of the chain at or after the first own step

    @property
    def state_dir(self) -> Path:
        return self.dir / STATE_FOLDER

    def payload(self) -> ResumePayload:
        return ResumePayload(
            dir=str(self.state_dir),
            fingerprint=self.fingerprint,
            every_s=self.every_s,
            attempt=self.attempt,
            expect=self.expect,
        )


def prepare(run: Any) -> tuple[ResumePlan, str | None]:
    """The resume folder of ``run``'s chain, checked (a folder it must not use is wiped) and
    made; with the one line to say, if any (why a copy starts from epoch 0, or where it
    resumes)."""
    spec = run.spec
    storage = run.study.storage
    frozen = storage.get_trial(run.trial_id)
    history = retries.retry_history(frozen)
    root = history[0] if history else run.number
    path = chain_dir(spec, root)
    print_ = fingerprint(spec, run.params)
    plan = ResumePlan(
        root=root,
        dir=path,
        fingerprint=print_,
        every_s=spec.trials.resume_every_s,
        attempt=run.number,
        chain_length=len(history),
        expect=False,
    )
    note: str | None = None
    if not history:
        discard(path)  # left by an earlier study in the same runs_dir
    else:
        before = history[-1]
        previous = storage.get_trial(
            storage.get_trial_id_from_study_id_trial_number(study_id_of(run.study.study), before)
        )
        chain = read_json(path / CHAIN_FILE)
        start = f"trial {run.number} (retry of {before}): starting from epoch 0"
        if previous.system_attrs.get(retries.RETRY_ATTR) != before:
            # A crash is not an interruption: continuing it would only crash again.
            discard(path)
            note = f"{start}, trial {before} failed by itself (not interrupted)"
        elif not isinstance(chain, dict):
            discard(path)
            note = f"{start}, no resume state in {path}"
            if path.parent.exists() and not path.exists():
                note += " (on a cluster trials.runs_dir must be shared by the nodes)"
        elif chain.get("fingerprint") != print_:
            discard(path)
            note = (
                f"{start}, its resume state was written with other params, trainer config or "
                "search space"
            )
        else:
            plan.earlier = _curve(path / CURVE_FILE)
            state = path / STATE_FOLDER
            if state.is_dir() and any(state.iterdir()):
                plan.expect = True
                saved = read_json(state / _SAVED_FILE)
                step = saved.get("step") if isinstance(saved, dict) else None
                where = f" saved after step {step}" if isinstance(step, int) else ""
                note = f"trial {run.number} (retry of {before}) resumes from {state}{where}"
            else:
                note = f"{start}, nothing was saved before the interruption"
    (path / STATE_FOLDER).mkdir(parents=True, exist_ok=True)
    write_json_atomic(path / CHAIN_FILE, {"fingerprint": print_, "root": root})
    return plan, note


def before_report(run: Any, step: int, metrics: dict[str, float]) -> None:
    """At each report, before it is stored: the first one splices the chain's earlier
    reports in (the steps before it, stored in Optuna too, so pruning sees the whole curve);
    every one is appended to the chain's ``curve.json``."""
    plan = run.resume
    assert plan is not None
    if plan.spliced is None:
        taken = [(s, m) for s, m in plan.earlier if s < step]
        plan.spliced = len(taken)
        plan.redone = sum(1 for s, _ in plan.earlier if s >= step)
        metric = None if run.spec.objective.is_multi else run.spec.objective.metric
        for s, m in taken:
            run.history.append((s, dict(m)))
            value = m.get(metric) if metric is not None else None
            if value is not None and math.isfinite(value):

                def store(s: int = s, value: float = value) -> None:
                    run.trial.report(value, s)

                with run.study.lock:
                    run.study.db(store, "storing a resumed curve")
    curve = [[s, m] for s, m in [*run.history, (step, metrics)]]
    write_json_atomic(plan.dir / CURVE_FILE, curve, indent=None)


def end_attrs(plan: ResumePlan) -> dict[str, Any]:
    """The user attrs a copy records: the epochs it resumed from and those it redid."""
    if plan.chain_length == 0:
        return {}
    return {"resumed_epochs": plan.spliced or 0, "redone_epochs": plan.redone}


def _kept(retry: bool, chain_length: int, max_retries: int) -> bool:
    """An interrupted attempt whose chain has a retry left hands its folder to its copy."""
    return retry and chain_length < max_retries


def on_end(run: Any, outcome: Outcome) -> None:
    """After the worker recorded how ``run`` ended: its folder goes unless a copy follows."""
    plan = run.resume
    if plan is not None and not _kept(
        outcome.retry, plan.chain_length, run.spec.trials.max_retries
    ):
        discard(plan.dir)


def after_sweep(spec: StudySpec, trial: optuna.trial.FrozenTrial, retry: bool) -> None:
    """After a sweep failed the stale ``trial`` (``retry``: for a retry): as :func:`on_end`."""
    if not _kept(retry, len(retries.retry_history(trial)), spec.trials.max_retries):
        discard(chain_dir(spec, root_number(trial)))


def sweep_hook(spec: StudySpec) -> Callable[[optuna.trial.FrozenTrial, bool], None] | None:
    """``retries.reconcile``'s ``on_failed`` with ``trials.resume`` on (else None)."""
    return functools.partial(after_sweep, spec) if spec.trials.resume else None


def closed_unrun(spec: StudySpec, trial: optuna.trial.FrozenTrial) -> None:
    """A copy closed as over budget when it started: its chain's state goes with it."""
    if spec.trials.resume:
        after_sweep(spec, trial, retry=False)
