"""Seeding a study: ``study.enqueue`` and ``study.warm_start`` run first, once per study.

The configs are enqueued as WAITING trials (Optuna's ``enqueue_trial``), which every worker
asks before sampling. Once per study, whoever runs it first and however many start together:
under the study's lock (:func:`dvt_hpo.store.lock.retry_lock`) a worker reads the study system
attr :data:`SEEDED_ATTR`; if it is set the study is seeded and nothing is done; else it
enqueues with ``skip_if_exists`` (a config the study already holds, run or waiting, is not
enqueued again: a worker killed half way leaves nothing twice), copies the earlier study's
trials not copied yet, then sets the mark.

``warm_start``: the earlier study's ``top`` best feasible COMPLETE trials, best first (several
objectives: its feasible Pareto front, by the first objective). A config with a value that no
longer fits this study's search space is *left out* (said, naming it), and the next best takes
its place: a clipped value would be a config nobody measured. A dimension the earlier study did
not have is drawn by the sampler, as for a partial ``enqueue`` entry. ``copy_results`` adds its
COMPLETE trials that fit the space (values, params, constraints; not their curves, so the
pruner judges this study's trials by this study's) as prior knowledge for the sampler, marked
:data:`~dvt_hpo.budget.trials.PRIOR_ATTR` so that no budget counts them; only when the objective
is the same (metric, direction, reduction, constraints): values of another quantity would
mislead the sampler, so it is refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dvt_hpo.budget.trials import PRIOR_ATTR
from dvt_hpo.exceptions import SpecError, StudyNotFoundError
from dvt_hpo.studyfile.seeding import misfit
from dvt_hpo.studyfile.urls import journal_path, sqlite_path
from dvt_hpo.text.redact import redact_url

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec.model import Dimension, StudySpec

__all__ = [
    "SEEDED_ATTR",
    "Seeds",
    "read_warm_start",
    "seed_study",
    "seeds_text",
    "warm_start_unless_seeded",
]

SEEDED_ATTR = "dvt_hpo:seeded"  # study system attr: what was enqueued, once per study
Lock = Callable[[], contextlib.AbstractContextManager[Any]]


class Seeds:
    """What a warm start gives: configs to enqueue (best first) and trials to copy."""

    def __init__(self) -> None:
        self.configs: list[tuple[dict[str, Any], str]] = []  # (params, where it came from)
        self.priors: list[optuna.trial.FrozenTrial] = []
        self.left_out: list[str] = []  # configs that no longer fit, said once


def fits(dims: Sequence[Dimension], params: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The params of ``params`` that are dimensions of ``dims`` (others dropped), and why one
    of them does not fit (None when all do)."""
    by_name = {d.name: d for d in dims}
    kept = {k: v for k, v in params.items() if k in by_name}
    for name, value in kept.items():
        why = misfit(by_name[name], value)
        if why is not None:
            return kept, f"{name}={value!r} {why}"
    return kept, None


def _error(spec: StudySpec, field: str, message: str) -> SpecError:
    file, line = spec.locate(field)
    return SpecError(message, file=file, line=line, field=field)


def read_warm_start(spec: StudySpec) -> Seeds:
    """Read the earlier study of ``study.warm_start`` (nothing is written there)."""
    from dvt_hpo.sampling.constraints import is_feasible
    from dvt_hpo.sampling.space import distributions
    from dvt_hpo.store import compat
    from dvt_hpo.store.opening import StudyAt

    warm = spec.study.warm_start
    seeds = Seeds()
    if warm is None:
        return seeds
    url = warm.storage or spec.study.storage
    # The earlier study's database, not this study's: the store's own refusal would name
    # study.storage and say to run this study file first, the wrong fix.
    left_out = url == spec.study.storage
    field = "study.warm_start.study" if left_out else "study.warm_start.storage"
    path = sqlite_path(url) or journal_path(url)
    if path is not None and not path.is_file():
        where = (
            " (study.warm_start.storage left out: this study's study.storage)" if left_out else ""
        )
        raise _error(
            spec,
            field,
            f"cannot read the earlier study {warm.study!r}: no database at {path}{where}; set "
            "study.warm_start.storage to the database the earlier study ran in",
        )
    try:
        source = StudyAt(url, warm.study, spec.path).load().study
    except StudyNotFoundError as exc:
        raise _error(
            spec,
            field if "no study named" not in exc.problem else "study.warm_start.study",
            f"cannot read the earlier study {warm.study!r} on {exc.redacted_url}: {exc.problem}",
        ) from None
    except Exception as exc:  # noqa: BLE001 - one line naming the field, the URL redacted
        text = redact_url(str(getattr(exc, "message", exc)))
        raise _error(
            spec,
            "study.warm_start.study",
            f"cannot read the earlier study {warm.study!r} on {redact_url(url)}: {text}",
        ) from None
    trials = source.get_trials(deepcopy=False)
    complete = [t for t in trials if t.state.name == "COMPLETE" and is_feasible(t.system_attrs)]
    if spec.objective.is_multi:
        front = {t.number for t in source.best_trials}
        complete = [t for t in complete if t.number in front]
    sign = -1.0 if source.directions[0].name == "MAXIMIZE" else 1.0
    complete.sort(key=lambda t: (sign * t.values[0], t.number))
    for trial in complete:
        if len(seeds.configs) >= warm.top:
            break
        params, why = fits(spec.search_space, dict(trial.params))
        if why is not None:
            seeds.left_out.append(f"trial {trial.number} ({why})")
            continue
        if params and all(params != p for p, _ in seeds.configs):
            seeds.configs.append((params, f"{warm.study}#{trial.number}"))
    if warm.copy_results:
        key = compat.ATTR_PREFIX + "objective"
        mine = compat.settings_attrs(spec)[key]
        theirs = source.user_attrs.get(key)
        if theirs != mine:
            raise _error(
                spec,
                "study.warm_start.copy_results",
                f"the earlier study {warm.study!r} has another objective ({theirs or 'none'} "
                f"recorded, this study {mine}): its values would mislead the sampler; set "
                "copy_results: false to enqueue its best configs only",
            )
        seeds.priors = _priors(
            spec, warm.study, complete_all(trials), distributions(spec.search_space)
        )
    return seeds


def warm_start_unless_seeded(spec: StudySpec) -> Seeds | None:
    """The warm start read (every refusal of it raised) before anything is written, or
    ``None`` when there is none to read: no ``study.warm_start``, or a study seeded already,
    whose resume must not need the earlier study any more. Nothing is written anywhere."""
    if spec.study.warm_start is None:
        return None
    from dvt_hpo.store.opening import StudyAt

    stored = StudyAt.of(spec).read()
    if stored is not None and stored.system_attrs.get(SEEDED_ATTR):
        return None
    return read_warm_start(spec)


def seeds_text(spec: StudySpec, seeds: Seeds) -> str:
    """What a warm start will run first, as validate says it."""
    warm = spec.study.warm_start
    assert warm is not None
    text = f"warm start: {len(seeds.configs)} best config(s) of {warm.study!r} run first"
    if seeds.priors:
        text += f", {len(seeds.priors)} of its trials copied for the sampler"
    if seeds.left_out:
        text += (
            f"; {len(seeds.left_out)} no longer fit the search space, left out: "
            f"{'; '.join(seeds.left_out[:5])}"
        )
    return text


def complete_all(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    return [t for t in trials if t.state.name == "COMPLETE" and not t.system_attrs.get(PRIOR_ATTR)]


def _priors(
    spec: StudySpec, name: str, trials: list[Any], dists: dict[str, Any]
) -> list[optuna.trial.FrozenTrial]:
    import optuna

    from dvt_hpo.optuna_api.private import CONSTRAINTS_KEY

    out = []
    key = CONSTRAINTS_KEY
    for trial in trials:
        params, why = fits(spec.search_space, dict(trial.params))
        if why is not None or not params:
            continue
        system = {PRIOR_ATTR: f"{name}#{trial.number}"}
        if key in trial.system_attrs:
            system[key] = trial.system_attrs[key]
        out.append(
            optuna.trial.create_trial(
                params=params,
                distributions={k: dists[k] for k in params},
                values=list(trial.values),
                user_attrs={"copied_from": f"{name}#{trial.number}", "status": "copied"},
                system_attrs=system,
            )
        )
    return out


def seed_study(
    study: optuna.Study,
    storage: Any,
    study_id: int,
    spec: StudySpec,
    lock: Lock,
    out: Callable[[str], None],
    seeds: Seeds | None = None,
) -> None:
    """Enqueue ``study.enqueue`` and the warm start, once per study (see the module);
    ``seeds``: the warm start read before the study was opened (read here when ``None``)."""
    if not spec.study.enqueue and spec.study.warm_start is None:
        return
    if storage.get_study_system_attrs(study_id).get(SEEDED_ATTR):
        return
    if seeds is None:
        seeds = read_warm_start(spec)  # before the lock: another database, maybe slow
    with lock():
        if storage.get_study_system_attrs(study_id).get(SEEDED_ATTR):
            return
        configs = [(dict(c), f"study.enqueue[{i}]") for i, c in enumerate(spec.study.enqueue)]
        configs += seeds.configs
        for params, origin in configs:
            study.enqueue_trial(params, user_attrs={"seed": origin}, skip_if_exists=True)
        if seeds.priors:
            have = {
                t.system_attrs.get(PRIOR_ATTR)
                for t in study.get_trials(deepcopy=False)
                if t.system_attrs.get(PRIOR_ATTR)
            }
            study.add_trials([t for t in seeds.priors if t.system_attrs[PRIOR_ATTR] not in have])
        mark = {
            "enqueue": len(spec.study.enqueue),
            "warm_start": len(seeds.configs),
            "copied": len(seeds.priors),
        }
        storage.set_study_system_attr(study_id, SEEDED_ATTR, mark)
    if seeds.left_out:
        out(
            f"study.warm_start: {len(seeds.left_out)} config(s) of {spec.study.warm_start.study!r} "
            f"no longer fit the search space, left out: {'; '.join(seeds.left_out[:5])}"
        )
    parts = [f"{mark['enqueue']} from study.enqueue"] if mark["enqueue"] else []
    if spec.study.warm_start is not None:
        parts.append(f"{mark['warm_start']} best of {spec.study.warm_start.study!r}")
        if mark["copied"]:
            parts.append(f"{mark['copied']} of its trials copied for the sampler")
    out(f"seeded: {', '.join(parts)} (run first, once per study)")
