"""``dvt-hpo best``: the best feasible trial (one objective) or the feasible Pareto front
(several), and a chosen trial as a trainer config, ready for ``dvt-hpo train``.

With several objectives no trial is "the" best: ``--export`` then needs ``--trial N`` (one
of the front's, or any complete trial, with a note), and is refused without it (exit 2),
listing the front, rather than guessing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dvt_hpo.config.paths import get_path, set_path
from dvt_hpo.exceptions import DvtHpoError, SpecError
from dvt_hpo.results.front import Best, no_feasible_message, select_best, violations
from dvt_hpo.sampling import space
from dvt_hpo.sampling.constraints import is_feasible
from dvt_hpo.store.trial_config import absolute_paths, has_path, ran_config
from dvt_hpo.study.messages import fmt_params

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec.model import StudySpec


def best_config(
    spec: StudySpec, study: optuna.Study, storage: Any, trial: Any
) -> tuple[dict[str, Any], bool]:
    """``(config, as_ran)``: the full trainer config of ``trial`` (what :func:`show_best`
    returns), with its found batch size and checkpointing back on, relative paths made
    absolute, ready for ``dvt-hpo train``.

    ``as_ran`` is True when the config is the one the trial ran with (stored when it started);
    False for a trial of an older study, whose config is rebuilt from today's study file.
    """
    best = trial
    stored = ran_config(storage, storage.get_study_id_from_name(study.study_name), best)
    if stored is not None:
        config = stored
    else:
        params = {d.name: best.params[d.name] for d in spec.search_space if d.name in best.params}
        config = absolute_paths(
            space.apply(spec.trainer.config, spec.search_space, params), spec.path.parent
        )
    bs = best.user_attrs.get("batch_size")
    if isinstance(bs, int) and not isinstance(bs, bool) and spec.batch_size.auto:
        set_path(config, spec.batch_size.path, bs, create=True)
        acc = best.user_attrs.get("accumulate_steps")
        if isinstance(acc, int) and has_path(config, spec.batch_size.accumulate_path):
            set_path(config, spec.batch_size.accumulate_path, acc)
    if has_path(config, "checkpoint.enable_checkpointing"):
        set_path(config, "checkpoint.enable_checkpointing", True)
    _as_it_ran(spec, config, best)
    return config, stored is not None


def _as_it_ran(spec: StudySpec, config: dict[str, Any], trial: Any) -> None:
    """What the trial ran with that changes its numbers besides its config, for the built-in
    trainer (``dvt-hpo train`` reproduces the trial's value with it): the CPU threads it got
    (``devices.threads``; ``train`` would otherwise take every core), and its objective as the
    checkpoint's monitor, so that ``train``'s summary line shows the value the study kept."""
    from dvt_hpo.spec.model import BUILTIN_ENTRYPOINT
    from dvt_hpo.train.metric_names import LEARNED

    if spec.trainer.entrypoint != BUILTIN_ENTRYPOINT:
        return
    threads = trial.user_attrs.get("threads")
    if (
        isinstance(threads, int)
        and not isinstance(threads, bool)
        and has_path(config, "devices.threads")
        and get_path(config, "devices.threads") is None
    ):
        set_path(config, "devices.threads", threads)
    metric, direction = spec.objective.metric, spec.objective.direction
    if metric in LEARNED and has_path(config, "checkpoint.monitor"):
        set_path(config, "checkpoint.monitor", metric)
        set_path(config, "checkpoint.mode", "max" if direction == "maximize" else "min")


def front_table(best: Best, names: Sequence[str]) -> list[str]:
    """The Pareto front as a table: trial number, each objective, params."""
    rows = [["trial", *names, "params"]]
    for t in best.trials:
        rows.append([str(t.number), *(f"{v:.6g}" for v in t.values), fmt_params(t.params)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in rows
    ]


def _chosen_trial(spec: StudySpec, trials: Sequence[Any], number: int, best: Best) -> Any:
    """Trial ``number`` when it is COMPLETE; SpecError (exit 2) otherwise."""
    found = [t for t in trials if t.number == number]
    if not found:
        last = max((t.number for t in trials), default=None)
        known = f"its trials are numbered 0 to {last}" if last is not None else "it has no trial"
        raise SpecError(f"study {spec.study.name!r} has no trial {number}; {known}", file="--trial")
    trial = found[0]
    if trial.state.name != "COMPLETE":
        raise SpecError(
            f"trial {number} of study {spec.study.name!r} is {trial.state.name}, not COMPLETE: "
            "only a complete trial has values and a config worth exporting",
            file="--trial",
        )
    return trial


def show_best(
    spec: StudySpec,
    study: optuna.Study,
    *,
    trial_number: int | None,
    export: bool,
    out: Callable[[str], None],
) -> Any:
    """Print the best (or the front, or trial ``trial_number``); returns the trial to export.
    Raises DvtHpoError (exit 1) when no complete trial is feasible and SpecError (exit 2) for
    a ``--trial`` that cannot be exported or an ``--export`` without one on several
    objectives."""
    objective = spec.objective
    trials = study.get_trials(deepcopy=False)
    best = select_best(trials, objective.directions)
    if trial_number is not None:
        trial = _chosen_trial(spec, trials, trial_number, best)
        _print_trial(out, "trial", trial, objective.names)
        if not is_feasible(trial.system_attrs):
            over = violations(trial, [c.metric for c in objective.constraints])
            out(f"note: trial {trial.number} does not meet objective.constraints ({over})")
        elif trial not in best.trials:
            where = "on the Pareto front" if objective.is_multi else "the best trial"
            shown = ", ".join(str(t.number) for t in best.trials) or "none"
            out(f"note: trial {trial.number} is not {where} (best: {shown})")
        return trial
    if best.none_feasible:
        raise DvtHpoError(
            no_feasible_message(best, spec.study.name, [c.metric for c in objective.constraints])
        )
    if not objective.is_multi:
        _print_trial(out, "best trial", best.trials[0], objective.names)
        return best.trials[0]
    out(f"Pareto front of study {spec.study.name!r}: {len(best.trials)} trial(s), feasible only")
    for line in front_table(best, objective.names):
        out(line)
    if export:
        numbers = ", ".join(str(t.number) for t in best.trials)
        raise SpecError(
            f"study {spec.study.name!r} has {len(objective.names)} objectives, so no single best "
            f"trial: choose one with --trial N (the Pareto front: trials {numbers})",
            file="--export",
        )
    return None


def _print_trial(out: Callable[[str], None], label: str, trial: Any, names: Sequence[str]) -> None:
    values = " ".join(f"{n}={v:.6g}" for n, v in zip(names, trial.values, strict=True))
    out(f"{label} {trial.number}: {values}")
    for name, value in trial.params.items():
        out(f"  {name}: {value}")
    if "batch_size" in trial.user_attrs:
        out(f"  batch size found: {trial.user_attrs['batch_size']}")


__all__ = ["best_config", "front_table", "show_best"]
