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
``--retry-failed`` copy) never uses it. This module imports no torch and never drives the trial's run: it answers
(:func:`prepare`, :meth:`ResumePlan.splice`) and the run applies.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dvt_hpo.atomic import read_json, write_json_atomic
from dvt_hpo.budget.trials import RETRY_ATTR
from dvt_hpo.recovery import retries
from dvt_hpo.sampling import space
from dvt_hpo.store.storage import PAUSED_ATTR
from dvt_hpo.wire.payload import ResumePayload
from dvt_hpo.wire.trial_dir import ResumeDir

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec.model import StudySpec

__all__ = [
    "ResumePlan",
    "after_sweep",
    "closed_unrun",
    "chain_curve",
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


def resume_root(spec: StudySpec) -> Path:
    return ResumeDir.root(spec.trials.runs_dir)


def chain_dir(spec: StudySpec, root: int) -> Path:
    return ResumeDir.of(spec.trials.runs_dir, root).path


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
    pauses: int  # of which paused, not failed (trials.pause): not retries
    expect: bool  # a state is there to continue from
    earlier: list[tuple[int, dict[str, float]]] = field(default_factory=list)  # the chain's curve
    spliced: int | None = None  # reports taken from the chain (set at the first own report)
    redone: int = 0  # reports of the chain at or after the first own step
    pause: bool = False  # trials.pause (the trial saves its state when it is stopped)
    # trials.pause: the last step at which an attempt of the chain was paused. The chain was
    # promoted past it, so steps up to it that an older state trains again are not judged again
    # (they would pause it at the same step for ever).
    promoted_at: int | None = None

    @property
    def state_dir(self) -> Path:
        return ResumeDir(self.dir).state

    def splice(self, step: int | None) -> list[tuple[int, dict[str, float]]]:
        """The chain's earlier reports the copy's first own report at ``step`` takes in (the
        steps before it; ``None``: all of them, for a copy that reported nothing because its
        state covered every epoch): the trial's run stores them in its history and in Optuna,
        so pruning sees the whole curve. Empty after the first report."""
        if self.spliced is not None:
            return []
        taken = [(s, dict(m)) for s, m in self.earlier if step is None or s < step]
        self.spliced = len(taken)
        self.redone = sum(1 for s, _ in self.earlier if step is not None and s >= step)
        return taken

    def write_curve(self, history: list[tuple[int, dict[str, float]]]) -> None:
        """The chain's curve so far (``curve.json``), written at every report so that it
        survives a ``kill -9`` of the worker."""
        curve = [[s, m] for s, m in history]
        write_json_atomic(ResumeDir(self.dir).curve, curve, indent=None)

    def payload(self) -> ResumePayload:
        return ResumePayload(
            dir=str(self.state_dir),
            fingerprint=self.fingerprint,
            every_s=self.every_s,
            attempt=self.attempt,
            expect=self.expect,
            pause=self.pause,
        )


def prepare(
    spec: StudySpec, storage: Any, study_id: int, trial_id: int, params: dict[str, Any]
) -> tuple[ResumePlan, str | None]:
    """The resume folder of trial ``trial_id``'s chain, checked (a folder it must not use is
    wiped) and made; with the one line to say, if any (why a copy starts from epoch 0, or where
    it resumes)."""
    frozen = storage.get_trial(trial_id)
    number = frozen.number
    history = retries.retry_history(frozen)
    root = history[0] if history else number
    folder = ResumeDir.of(spec.trials.runs_dir, root)
    path = folder.path
    print_ = fingerprint(spec, params)
    earlier: list[tuple[int, dict[str, float]]] = []
    expect = False
    note: str | None = None
    if not history:
        discard(path)  # left by an earlier study in the same runs_dir
    else:
        before = history[-1]
        previous = storage.get_trial(
            storage.get_trial_id_from_study_id_trial_number(study_id, before)
        )
        chain = read_json(folder.chain)
        paused = previous.system_attrs.get(PAUSED_ATTR) == before
        how = "continues paused trial" if paused else "retry of"
        start = f"trial {number} ({how} {before}): starting from epoch 0"
        if previous.system_attrs.get(RETRY_ATTR) != before and not paused:
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
            earlier = _curve(folder.curve)
            state = folder.state
            if state.is_dir() and any(state.iterdir()):
                expect = True
                saved = read_json(folder.saved)
                step = saved.get("step") if isinstance(saved, dict) else None
                where = f" saved after step {step}" if isinstance(step, int) else ""
                note = f"trial {number} ({how} {before}) resumes from {state}{where}"
            else:
                stop = "pause" if paused else "interruption"
                note = f"{start}, nothing was saved before the {stop}"
    folder.state.mkdir(parents=True, exist_ok=True)
    write_json_atomic(folder.chain, {"fingerprint": print_, "root": root})
    plan = ResumePlan(
        root=root,
        dir=path,
        fingerprint=print_,
        every_s=spec.trials.resume_every_s,
        attempt=number,
        chain_length=len(history),
        pauses=retries.pauses_before(frozen),
        expect=expect,
        earlier=earlier,
        pause=spec.trials.pause,
        promoted_at=_paused_at(storage, study_id, history) if spec.trials.pause else None,
    )
    return plan, note


def _paused_at(storage: Any, study_id: int, history: list[int]) -> int | None:
    """The last step at which an attempt of the chain ``history`` was paused, if any."""
    steps: list[int] = []
    for number in history:
        trial = storage.get_trial(storage.get_trial_id_from_study_id_trial_number(study_id, number))
        if trial.system_attrs.get(PAUSED_ATTR) == number and trial.intermediate_values:
            steps.append(max(trial.intermediate_values))
    return max(steps, default=None)


def chain_curve(
    spec: StudySpec, trial: optuna.trial.FrozenTrial
) -> list[tuple[int, dict[str, float]]]:
    """Every report of ``trial``'s chain so far, as its worker wrote them (``[]``: none)."""
    return _curve(ResumeDir.of(spec.trials.runs_dir, root_number(trial)).curve)


def end_attrs(plan: ResumePlan) -> dict[str, Any]:
    """The user attrs a copy records: the epochs it resumed from and those it redid."""
    if plan.chain_length == 0:
        return {}
    return {"resumed_epochs": plan.spliced or 0, "redone_epochs": plan.redone}


def _kept(retry: bool, retried: int, max_retries: int) -> bool:
    """An interrupted attempt whose chain has a retry left (``retried``: the copies made for
    failures so far) hands its folder to its copy."""
    return retry and retried < max_retries


def on_end(plan: ResumePlan, retry: bool, max_retries: int, *, paused: bool = False) -> None:
    """After the worker recorded how ``plan``'s attempt ended (``retry``: for a retry;
    ``paused``: paused, trials.pause): its folder goes unless a copy may follow."""
    if not paused and not _kept(retry, plan.chain_length - plan.pauses, max_retries):
        discard(plan.dir)


def after_sweep(spec: StudySpec, trial: optuna.trial.FrozenTrial, retry: bool) -> None:
    """After a sweep failed the stale ``trial`` (``retry``: for a retry): as :func:`on_end`."""
    retried = len(retries.retry_history(trial)) - retries.pauses_before(trial)
    if not _kept(retry, retried, spec.trials.max_retries):
        discard(chain_dir(spec, root_number(trial)))


def sweep_hook(spec: StudySpec) -> Callable[[optuna.trial.FrozenTrial, bool], None] | None:
    """``retries.reconcile``'s ``on_failed`` with ``trials.resume`` on (else None)."""
    return functools.partial(after_sweep, spec) if spec.trials.resume else None


def closed_unrun(spec: StudySpec, trial: optuna.trial.FrozenTrial) -> None:
    """A copy closed as over budget when it started: its chain's state goes with it."""
    if spec.trials.resume:
        after_sweep(spec, trial, retry=False)
