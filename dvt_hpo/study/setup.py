"""A run's start on its study: the study opened (or created) through
:meth:`dvt_hpo.store.opening.StudyAt.create_or_load` with the direction and search-space checks
under its creation lock, then the sampler and pruner, the study file's settings written into the
study's attrs, its start and its seeds; and the launcher its trials start through."""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dvt_hpo.budget.compute import mark_started
from dvt_hpo.exceptions import DvtHpoError, SpecError, StudyStopped
from dvt_hpo.optuna_api.private import storage_of, study_id_of
from dvt_hpo.process import launch
from dvt_hpo.store import compat
from dvt_hpo.store.lock import LOCK_TIMEOUT_S, retry_lock
from dvt_hpo.store.opening import OpenStudy, StoredStudy, StudyAt
from dvt_hpo.store.queries import count_trials
from dvt_hpo.store.storage import HeartbeatSettings
from dvt_hpo.study.seeding import seed_study, warm_start_unless_seeded
from dvt_hpo.studyfile import BUILTIN_ENTRYPOINT
from dvt_hpo.text.redact import redact_url

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec.model import StudySpec

ATTR_PREFIX = compat.ATTR_PREFIX


def open_for_run(
    spec: StudySpec, *, allow_space_change: bool, out: Callable[[str], None]
) -> OpenStudy:
    """The run's study, created or loaded, checked against the study file, set up to run."""
    import optuna

    from dvt_hpo.sampling.optuna_factory import build_pruner, build_sampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # We drive heartbeats ourselves around ask/tell (Optuna warns that they are meant for
    # Study.optimize) and use fail_stale_trials knowingly (marked experimental).
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
    warnings.filterwarnings("ignore", message=".*fail_stale_trials is experimental")
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    # Every refusal of the warm start (no such study, another objective) comes before the
    # study is created or its start marked: a refused run writes nothing.
    seeds = warm_start_unless_seeded(spec)

    def init(study: optuna.Study) -> None:
        # Under the storage's creation lock: workers starting at the same instant on a fresh
        # database see one study and one set of stored settings.
        check_settings(study, spec, allow_space_change=allow_space_change, out=out)

    opened = StudyAt.of(spec).create_or_load(
        list(spec.objective.directions),
        heartbeat=HeartbeatSettings(
            spec.study.heartbeat_interval_s, spec.study.grace_period_s, spec.trials.max_retries
        ),
        init=init,
    )
    study, storage, study_id = opened.study, opened.storage, opened.study_id
    # Replaced at this worker's first ask by reseeded_sampler (a seed unique to the worker);
    # until then it only sees that ask's before_trial hook, which draws nothing.
    existing = count_trials(storage, study_id)
    study.sampler = build_sampler(
        spec.study.sampler,
        spec.search_space,
        seed_offset=existing,
        parallel=spec.trials.parallel,
        constrained=bool(spec.objective.constraints),
    )
    study.pruner = build_pruner(spec.study.pruner)
    with contextlib.suppress(Exception):
        study.set_metric_names(list(spec.objective.names))
    # Once per study, under its lock: its start (study.budget.hours), and its seeds. A worker
    # waits for it as long as for the creation lock: on SQLite both are the folder's flock, so
    # workers started together queue behind each other's creation (8 at once on 2 busy cores
    # passed the retry lock's 10 s), and unlike a repair this step cannot be left for later.
    lock = functools.partial(retry_lock, spec.study.storage, study_id, timeout_s=LOCK_TIMEOUT_S)
    mark_started(storage, study_id, lock)
    seed_study(study, storage, study_id, spec, lock, out, seeds)
    return opened


def open_checked(
    spec: StudySpec, *, allow_space_change: bool, out: Callable[[str], None]
) -> OpenStudy:
    """:func:`open_for_run` after the runs folder is checked (before the storage is touched: a
    trial's folder that cannot be made would otherwise fail only once the study is written);
    a storage that cannot be opened ends the run with one line (``StudyStopped``)."""
    check_runs_dir(spec)
    try:
        return open_for_run(spec, allow_space_change=allow_space_change, out=out)
    except DvtHpoError:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise StudyStopped(
            f"cannot open study.storage {redact_url(spec.study.storage)}: "
            f"{type(exc).__name__}: {first}"
        ) from exc


def reseeded_sampler(spec: StudySpec, first_number: int) -> optuna.samplers.BaseSampler:
    """The run's sampler seeded with ``sampler.seed + first_number``, the number of the first
    trial this worker asked (see :meth:`StudyRunner._launch`)."""
    from dvt_hpo.sampling.optuna_factory import build_sampler

    return build_sampler(
        spec.study.sampler,
        spec.search_space,
        seed_offset=first_number,
        parallel=spec.trials.parallel,
        constrained=bool(spec.objective.constraints),
    )


def launcher_for(
    spec: StudySpec, child_env: dict[str, str], *, out: Callable[[str], None]
) -> launch.Launcher:
    """How the run's trials start: plain or torchrun, cold or forked from a warm template."""
    return launch.Launcher(
        launcher=spec.trials.launcher,
        nproc_per_node=spec.trials.nproc_per_node,
        warm=spec.trials.warm,
        preload=launch.warm_modules(
            spec.trainer.entrypoint, BUILTIN_ENTRYPOINT, spec.trials.preload
        ),
        base_env=child_env,
        cwd=spec.path.parent,
        log_path=spec.trials.runs_dir / "warm-template.log",
        # What the template's warm-up hooks write (import-time settings and caches) stays in
        # the study's runs folder.
        warm_dir=spec.trials.runs_dir / "warm-template",
        log_limit=spec.trials.log_limit,
        out=out,
    )


def runs_dir_problem(path: Path) -> str | None:
    """Why trial folders cannot be made under ``path`` (``None`` when they can), found without
    creating anything: the folder, or its nearest existing ancestor, must be a writable
    folder."""
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if existing != path and not existing.is_dir():
        return f"{str(existing)!r} is a file, so {str(path)!r} cannot be created"
    if not existing.is_dir():
        return f"{str(path)!r} is not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "" if existing == path else f" (its nearest existing folder {str(existing)!r})"
        return f"{str(path)!r}{what} is not writable by this user"
    return None


def check_runs_dir(spec: StudySpec) -> None:
    """SpecError (exit 2) when ``trials.runs_dir`` cannot hold trial folders."""
    problem = runs_dir_problem(spec.trials.runs_dir)
    if problem is not None:
        raise SpecError(
            f"{problem}; trials.runs_dir must be a folder this user can create and write",
            file=spec.path,
            field="trials.runs_dir",
        )


def study_settings(spec: StudySpec) -> dict[str, Any]:
    """What a study records about how it was run (compared on every resume), by name."""
    return {
        key[len(compat.ATTR_PREFIX) :]: value for key, value in compat.settings_attrs(spec).items()
    }


def check_settings(
    study: optuna.Study, spec: StudySpec, *, allow_space_change: bool, out: Callable[[str], None]
) -> None:
    """Refuse a study file that no longer fits the stored study (:mod:`dvt_hpo.store.compat`), say
    what changed that is allowed, and store the file's settings."""
    comparison = compat.compare(
        spec, StoredStudy.from_study(study), allow_space_change=allow_space_change
    )
    error = compat.refusal_error(spec, comparison, redact_url(spec.study.storage))
    if error is not None:
        raise error
    if comparison.space_changes:
        out("search space changed: " + "; ".join(comparison.space_changes))
    for note in comparison.notes:
        out(f"note: {note}")
    attrs = study.user_attrs
    for key, value in compat.settings_attrs(spec).items():
        if attrs.get(key) != value:
            study.set_user_attr(key, value)
    storage, study_id = storage_of(study), study_id_of(study)
    stored = storage.get_study_system_attrs(study_id)
    for key, value in compat.system_attrs(spec).items():
        if stored.get(key) != value:
            storage.set_study_system_attr(study_id, key, value)


__all__ = [
    "launcher_for",
    "ATTR_PREFIX",
    "check_runs_dir",
    "check_settings",
    "open_checked",
    "open_for_run",
    "reseeded_sampler",
    "runs_dir_problem",
]
