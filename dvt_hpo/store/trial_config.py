"""The trainer config a trial ran with, kept in the study storage so ``best --export`` writes
what ran, not what today's study file and ``--set`` say.

A trial's config is its run's base config (the study file's ``trainer.config`` with the
run's ``--set`` overrides, before any trial-specific change) with the trial's params written at
their dimensions' paths. The base config, the paths and the folder trials ran in are stored
once per distinct base as a study system attr keyed by their hash; each trial stores only that
16-character key. Hundreds of trials of one run therefore share one copy, a trial folder
removed by ``trials.keep_logs`` loses nothing, and system attrs stay out of the dashboard's
user-attr tables.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dvt_hpo.config.paths import get_path, set_path
from dvt_hpo.sampling import space
from dvt_hpo.wire.trial_dir import TrialDir

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec.model import StudySpec

TRIAL_ATTR = "dvt_hpo:config"  # trial system attr: the key of its run's base config
STUDY_PREFIX = "dvt_hpo:config:"  # study system attr prefix: key -> base config record
# Config fields that name files or folders: trials run in the study file's folder, so a
# relative value there is made absolute for a config that may be trained from anywhere.
# The built-in trainer's, and the deepvisiontools backend's dataset roots (data.train/valid).
PATH_FIELDS = (
    "data.root",
    "data.val_root",
    "data.train",
    "data.valid",
    "output_dir",
    "checkpoint.dir",
)


def base_record(spec: StudySpec) -> dict[str, Any]:
    """What rebuilds any trial of this run: base config, param paths, the trials' folder."""
    record = {
        "config": copy.deepcopy(spec.trainer.config),
        "paths": {dim.name: dim.path for dim in spec.search_space},
        "cwd": str(spec.path.parent),
        "entrypoint": spec.trainer.entrypoint,
    }
    if spec.trainer.command is not None:
        # Only when set: the keys of existing studies' records stay the same.
        record["command"] = list(spec.trainer.command)
    return record


def record_key(record: Mapping[str, Any]) -> str:
    blob = json.dumps(record, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def store_base(storage: Any, study_id: int, spec: StudySpec) -> str:
    """Store this run's base record once (shared by every worker with the same one); its key."""
    record = base_record(spec)
    key = record_key(record)
    if STUDY_PREFIX + key not in storage.get_study_system_attrs(study_id):
        storage.set_study_system_attr(study_id, STUDY_PREFIX + key, record)
    return key


def has_path(config: Any, path: str) -> bool:
    try:
        get_path(config, path)
    except (KeyError, IndexError, AttributeError, TypeError):
        return False
    return True


def trial_run_config(spec: StudySpec, params: Mapping[str, Any], number: int) -> dict[str, Any]:
    """The config a trial process gets: the params at their paths and checkpointing off (HPO
    trials must not fill disks); the built-in trainer writes under the trial's folder."""
    from dvt_hpo.studyfile import BUILTIN_ENTRYPOINT

    config = space.apply(spec.trainer.config, spec.search_space, params)
    if spec.trainer.entrypoint == BUILTIN_ENTRYPOINT:
        config.setdefault("checkpoint", {})["enable_checkpointing"] = False
        config["output_dir"] = str(TrialDir.of(spec.trials.runs_dir, number).output)
    elif has_path(config, "checkpoint.enable_checkpointing"):
        set_path(config, "checkpoint.enable_checkpointing", False)
    return config


def ran_config(
    storage: Any, study_id: int, trial: optuna.trial.FrozenTrial
) -> dict[str, Any] | None:
    """The config ``trial`` ran with (relative paths made absolute against the folder it ran
    in); ``None`` for a trial of a study older than stored configs."""
    key = trial.system_attrs.get(TRIAL_ATTR)
    if not isinstance(key, str):
        return None
    record = storage.get_study_system_attrs(study_id).get(STUDY_PREFIX + key)
    if not isinstance(record, Mapping) or not isinstance(record.get("config"), Mapping):
        return None
    config = copy.deepcopy(dict(record["config"]))
    paths = record.get("paths") or {}
    for name, value in trial.params.items():
        if name in paths:
            set_path(config, paths[name], value, create=True)
    return absolute_paths(config, Path(record.get("cwd") or "."))


def absolute_paths(config: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """``config`` with each relative :data:`PATH_FIELDS` value made absolute against
    ``base_dir`` (URLs and absent or empty fields left alone)."""
    for field in PATH_FIELDS:
        if not has_path(config, field):
            continue
        value = get_path(config, field)
        if not isinstance(value, str) or not value or "://" in value:
            continue
        path = Path(value).expanduser()
        if not path.is_absolute():
            set_path(config, field, str((base_dir / path).resolve()))
    return config


__all__ = [
    "PATH_FIELDS",
    "STUDY_PREFIX",
    "TRIAL_ATTR",
    "absolute_paths",
    "base_record",
    "has_path",
    "ran_config",
    "record_key",
    "store_base",
    "trial_run_config",
]
