"""The lines a run prints about itself that need more than a format string: the objective,
the dashboard command, the trials a resumed run waits on, how to rerun failed trials. Every
printed follow-up command names the same study: the same file and ``--set`` overrides.

Pure functions of their arguments (no storage access), so each wording is tested directly.
"""

from __future__ import annotations

import importlib.util
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dvt_hpo.budget.trials import OVER_BUDGET_ATTR, PRIOR_ATTR
from dvt_hpo.results.outcome import INTERRUPTED, RECORDED_ELSEWHERE
from dvt_hpo.studyfile.urls import storage_kind
from dvt_hpo.text.redact import redact_url

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.devices.slots import Slot
    from dvt_hpo.results.events import TrialFinished
    from dvt_hpo.results.front import Best
    from dvt_hpo.sampling.kinds import Kind
    from dvt_hpo.spec.model import StudySection, StudySpec
    from dvt_hpo.studyfile import ObjectiveSpec


def objective_text(objective: ObjectiveSpec) -> str:
    """``maximize macro_f1 (best of epochs)``: the direction always shown in the start line."""
    from dvt_hpo.studyfile.objective import describe_objective

    return describe_objective(objective)


_WORDS = {
    "p_threshold": "p",
    "n_startup_trials": "startup trials",
    "n_warmup_steps": "warm-up steps",
}


def _settings(row: Kind, kwargs: Mapping[str, Any]) -> list[str]:
    """The settings of a kind shown: those every study of it is shaped by (its row's
    ``shown_always``: TPE's model, Wilcoxon's threshold), even when left to the class, and those
    the file writes."""
    from dvt_hpo.sampling.optuna_factory import yaml_parameters

    params = yaml_parameters(row.load())
    shown = dict.fromkeys(row.shown_always)
    shown.update(dict.fromkeys(k for k in kwargs if k != "search_space"))
    out = []
    for name in shown:
        value = kwargs.get(name, params[name].default if name in params else None)
        if name == "multivariate":
            out.append("multivariate" if value else "univariate")
        elif name == "constant_liar":
            if value:
                out.append("constant liar")
        elif isinstance(value, bool):
            out.append(name.replace("_", " ") + ("" if value else " off"))
        else:
            out.append(f"{_WORDS.get(name, name.replace('_', ' '))} {value}")
    return out


def algorithms_text(
    study: StudySection,
    *,
    multi_objective: bool = False,
    constrained: bool = False,
    epochs: tuple[int | None, ...] = (None,),
) -> str:
    """``sampler TPE (univariate, seed 3) · pruner Wilcoxon (p 0.1) — the defaults``: what a
    study uses, with the settings that shape it (the start line and ``validate`` say it).
    ``epochs``: the curve lengths whose defaults count (the default of one objective follows
    ``trainer.config.epochs``; None: a file that does not say)."""
    from dvt_hpo.sampling.kinds import PRUNERS, SAMPLERS, default_algorithms

    sampler, pruner = study.sampler, study.pruner
    rows = [
        default_algorithms(multi_objective=multi_objective, constrained=constrained, epochs=e)
        for e in epochs
    ]
    default_samplers = [(s.kind, s.kwargs) for s, _ in rows]
    default_pruners = [(p.kind, p.kwargs) for _, p in rows]
    # A seed, and what parallel trials get (the registry's when_parallel: TPE's constant liar),
    # leave a default the default.
    added = (
        {a for a, _ in SAMPLERS[sampler.kind].when_parallel} if sampler.kind in SAMPLERS else set()
    )
    own = {k: v for k, v in sampler.kwargs.items() if k != "seed" and k not in added}
    # Arguments the loader derives from the study file (the trainer's epochs) leave a default
    # the default.
    derived = PRUNERS[pruner.kind].derived_arguments if pruner.kind in PRUNERS else ()
    pruner_own = {k: v for k, v in pruner.kwargs.items() if k not in derived}
    is_default = (
        (sampler.kind, own) in default_samplers,
        (pruner.kind, pruner_own) in default_pruners,
    )
    parts = []
    for what, spec, rows in (("sampler", sampler, SAMPLERS), ("pruner", pruner, PRUNERS)):
        row = rows[spec.kind]
        settings = _settings(row, spec.kwargs)
        shown = f" ({', '.join(settings)})" if settings else ""
        parts.append(f"{what} {row.display}{shown}")
    line = " · ".join(parts)
    if all(is_default):
        return line + " — the defaults"
    if any(is_default):
        return line + (" — the default sampler" if is_default[0] else " — the default pruner")
    return line


def spec_algorithms_text(spec: StudySpec) -> str:
    """:func:`algorithms_text` of a whole study file: its defaults follow its objective."""
    from dvt_hpo.studyfile.defaults import file_epochs

    objective = spec.objective
    # The loader picked the default from the file's epochs, or from none when the epochs came
    # in with trainer.config_file (read after the choice): both rows count.
    said = file_epochs({"trainer": {"config": spec.trainer.config}})
    return algorithms_text(
        spec.study,
        multi_objective=objective.is_multi,
        constrained=bool(objective.constraints),
        epochs=(None, said),
    )


def dashboard_available() -> bool:
    return importlib.util.find_spec("optuna_dashboard") is not None


def shown_path(path: Path) -> str:
    """The study file as a printed command names it: relative to the working directory when it
    is below it (what the user typed, usually), else absolute."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _pasteable(override: str) -> tuple[str, str | None]:
    """``override`` with a URL's password left out (never printed), and how to pass it."""
    import re

    how: list[str] = []

    def strip(match: re.Match[str]) -> str:
        url = match.group(0)
        redacted = redact_url(url)
        if redacted == url:
            return url
        without = redacted.replace(":***@", "@", 1)
        if storage_kind(url) == "postgresql" and "***" not in without:
            how.append("set PGPASSWORD (or use ~/.pgpass) in the shell that runs it")
        else:
            how.append("put it back in the URL")
        return without

    text = re.sub(r"[A-Za-z][\w+.\-]*://\S+", strip, override)
    return text, how[0] if how else None


def follow_up(command: str, study_file: Path, overrides: Sequence[str] = (), *extra: str) -> str:
    """``dvt-hpo COMMAND study.yaml --set ... EXTRA``: a command to paste that names the same
    study as the run that prints it (its ``--set`` overrides carried; a password in one left
    out, and said how to pass)."""
    words = ["dvt-hpo", command, shown_path(study_file)]
    notes: list[str] = []
    for override in overrides:
        text, how = _pasteable(override)
        words += ["--set", text]
        if how is not None:
            notes.append(how)
    line = shlex.join([*words, *extra])
    if notes:
        line += f"  (the storage password is not shown: {notes[0]})"
    return line


def nothing_to_run_line(spec: StudySpec, where: str, used: int) -> str:
    """A run whose ``study.n_trials`` is used up, with nothing running or pending."""
    return (
        f"study {spec.study.name!r} ({where}) already has {used}/{spec.study.n_trials} "
        "trials; nothing to run"
    )


def dashboard_hint(
    study_file: Path, overrides: Sequence[str] = (), *, installed: bool | None = None
) -> str:
    """How to watch the study: ``dvt-hpo dashboard`` on the same study file and overrides (it
    runs from the same environment, where a bare ``optuna-dashboard`` may not be on PATH), or
    how to install optuna-dashboard."""
    if not (dashboard_available() if installed is None else installed):
        return "watch it in a browser: pip install 'dvt-hpo[dashboard]' (optuna-dashboard)"
    return f"watch it: {follow_up('dashboard', study_file, overrides)}"


def waiting_line(
    numbers: Sequence[int],
    ages: Mapping[int, float],
    *,
    grace_period_s: float,
    heartbeat_interval_s: float,
) -> str:
    """Which RUNNING trials of another (or a dead) orchestrator a run waits on, their
    heartbeat ages and the longest wait before the stale rule retries them here."""
    parts = [
        f"trial {n} (last heartbeat {ages[n]:.0f} s ago)" if n in ages else f"trial {n}"
        for n in numbers
    ]
    # A trial without a known age may have beaten just now: a whole grace period then.
    known = [grace_period_s - ages[n] for n in numbers if n in ages]
    longest = max(0.0, max(known) if len(known) == len(numbers) else grace_period_s)
    return (
        f"waiting for {len(numbers)} RUNNING trial(s) of another or a dead orchestrator: "
        + ", ".join(parts)
        + f". A trial whose heartbeat is older than study.grace_period_s={grace_period_s:g} s "
        f"is failed and retried here: at most about {longest + heartbeat_interval_s:.0f} s "
        "if their orchestrator is dead; as long as they run if it is alive"
    )


def ended_before_start(number: int, *, retried: bool, grace_s: float) -> str:
    """A trial another worker ended between this worker's ask and its launch: what happened,
    what becomes of it, and the setting that decides it."""
    then = "its copy is queued for a retry" if retried else "it is not retried"
    return (
        f"trial {number} was ended by another worker before it started here (its heartbeat "
        f"looked older than study.grace_period_s={grace_s:g} s; on a machine this loaded, "
        f"raise it): {then}; this worker goes on"
    )


def fmt_params(params: Mapping[str, Any]) -> str:
    return " ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items()
    )


def _names(metrics: str | Sequence[str]) -> list[str]:
    return [metrics] if isinstance(metrics, str) else list(metrics)


def values_text(names: str | Sequence[str], values: Sequence[float], digits: int = 4) -> str:
    """``macro_f1=0.9100 latency_ms=3.2000``: every objective of a trial."""
    return " ".join(f"{n}={v:.{digits}f}" for n, v in zip(_names(names), values, strict=False))


def trial_line(event: TrialFinished, metric: str | Sequence[str]) -> str:
    """The one line a finished trial gets (the study loop's and the progress view's);
    ``metric``: the objective's name, or every objective's."""
    names = _names(metric)
    # A pruned trial has one value: its objective's last report.
    values = event.values or (() if event.value is None else (event.value,))
    value = values_text(names, values)
    if event.feasible is False:
        value += " infeasible"
    bs = event.user_attrs.get("batch_size")
    extra = f" batch={bs}" if isinstance(bs, int) else ""
    cap = event.user_attrs.get("batch_size_data_cap")
    if extra and isinstance(cap, int):
        extra += f" (search capped at the {cap} training samples per process)"
    reason = f" reason: {event.reason}" if event.reason and event.state != "COMPLETE" else ""
    # study.budget: spent / total once this trial is counted.
    budget = f" | budget {event.user_attrs['budget']}" if event.user_attrs.get("budget") else ""
    # A trial the user's stop (Ctrl-C, SIGTERM, a job's end) interrupted is FAIL in Optuna, so
    # that the next run retries it; "FAIL" would read as broken, so the line says STOPPED.
    state = event.state
    if state == "FAIL" and event.user_attrs.get("status") in (INTERRUPTED, RECORDED_ELSEWHERE):
        state = "STOPPED"  # or stopped as another worker failed it for a retry meanwhile
    elif state == "PRUNED" and event.user_attrs.get("status") == "paused":
        state = "PAUSED"  # trials.pause: its state is kept; it may continue
    return (
        f"trial {event.number:>3} {state:<8} {value:<18} "
        f"{event.duration_s:6.1f}s  {fmt_params(event.params)}{extra}{reason}{budget}"
    )


def run_summary(spec: StudySpec, trials: Sequence[optuna.trial.FrozenTrial]) -> list[str]:
    """:func:`summary_lines` of a run of ``spec``."""
    from dvt_hpo.results.front import select_best

    return summary_lines(
        trials,
        select_best(trials, spec.objective.directions),
        spec.objective.names,
        spec.path,
        study_name=spec.study.name,
        constraints=[c.metric for c in spec.objective.constraints],
        overrides=spec.overrides,
    )


def summary_lines(
    trials: Sequence[optuna.trial.FrozenTrial],
    best: Best | optuna.trial.FrozenTrial | None,
    metric: str | Sequence[str],
    study_file: Path,
    *,
    study_name: str = "",
    constraints: Sequence[str] = (),
    overrides: Sequence[str] = (),
) -> list[str]:
    """The run's closing lines: trials by state, how to rerun failed ones, the best feasible
    trial (one objective) or the feasible Pareto front (several), or that none is feasible."""
    from dvt_hpo.recovery import retries
    from dvt_hpo.results.front import Best, no_feasible_message

    counts: dict[str, int] = {}
    counted = retries.counted_numbers(list(trials))
    for t in trials:
        if t.system_attrs.get(OVER_BUDGET_ATTR):
            state = "over budget (not counted)"
        elif t.system_attrs.get(PRIOR_ATTR):
            state = "copied from an earlier study (not counted)"
        elif t.number not in counted:
            state = "paused and continued" if retries.is_paused(t) else "failed and retried"
        else:
            state = t.state.name.lower()
        counts[state] = counts.get(state, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    lines = [f"trials: {summary or 'none'}"]
    failed = retries.failed_not_retried(list(trials))
    if failed:
        lines.append(retry_hint(failed, study_file, overrides))
    names = _names(metric)
    chosen = best.trials if isinstance(best, Best) else (() if best is None else (best,))
    if isinstance(best, Best) and best.none_feasible:
        lines.append(no_feasible_message(best, study_name, constraints))
    elif len(names) > 1 and chosen:
        lines.append(f"Pareto front ({len(chosen)} trial(s), feasible only):")
        lines.extend(
            f"  trial {t.number}: {values_text(names, t.values)}  {fmt_params(t.params)}"
            for t in chosen
        )
    elif chosen:
        top = chosen[0]
        lines.append(
            f"best trial {top.number}: {values_text(names, top.values)}  {fmt_params(top.params)}"
        )
    return lines


def retry_hint(failed: Sequence[int], study_file: Path, overrides: Sequence[str] = ()) -> str:
    return (
        f"{len(failed)} failed trial(s) can run again with their params (counted within "
        f"study.n_trials): {follow_up('run', study_file, overrides, '--retry-failed')}"
    )


def retry_failed_line(numbers: Sequence[int]) -> str:
    """What ``--retry-failed`` did: the trials enqueued again, or none."""
    if not numbers:
        return "--retry-failed: no failed trial to retry"
    return f"--retry-failed: trial(s) {', '.join(map(str, numbers))} enqueued again"


def start_line(spec: StudySpec, where: str, n_done: int, slots: Sequence[Slot]) -> str:
    """The run's first line: the study, its objective and algorithms, what is done, the slots."""
    from dvt_hpo.devices.slots import packing_text
    from dvt_hpo.recovery.resume import resume_root

    n_trials = spec.study.n_trials
    packing = spec.trials.per_gpu > 1  # also said when ignored (no GPU)
    return (
        f"study {spec.study.name!r} on {where}: "
        f"{objective_text(spec.objective)}; "
        f"{spec_algorithms_text(spec)}; "
        + (f"{n_done}/{n_trials} trials done, " if n_trials else f"{n_done} done, ")
        + f"{spec.trials.parallel} at a time"
        + (f", {packing_text(slots, spec.trials.per_gpu)}" if packing else "")
        + (f"; resume states in {resume_root(spec)}" if spec.trials.resume else "")
    )


__all__ = [
    "algorithms_text",
    "spec_algorithms_text",
    "start_line",
    "dashboard_available",
    "dashboard_hint",
    "fmt_params",
    "follow_up",
    "nothing_to_run_line",
    "objective_text",
    "retry_failed_line",
    "retry_hint",
    "shown_path",
    "summary_lines",
    "trial_line",
    "values_text",
    "waiting_line",
]
