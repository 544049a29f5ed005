""":func:`load_spec`: a study file (and its ``--set`` overrides) -> a validated :class:`StudySpec`.

Reads the file with line numbers, applies the overrides, reads each section group, then runs
the cross-section checks (Optuna builds the sampler and pruner once). What ``run`` and
``validate`` check on the machine beyond a valid file is the study's preflight
(:func:`dvt_hpo.run.preflight.load_runnable`), which reads the file through
:func:`read_study_file` for its line numbers. The first problem raises :class:`~dvt_hpo.exceptions.SpecError` naming the file, the line, the dotted
field, the rule and the value. Loading writes nothing anywhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dvt_hpo.config.hints import describe, did_you_mean
from dvt_hpo.config.paths import format_path
from dvt_hpo.config.source import Doc, apply_override, parse_override, read_yaml
from dvt_hpo.exceptions import SpecError
from dvt_hpo.spec.model import Condition, StudySpec
from dvt_hpo.studyfile.batch import read_batch_size
from dvt_hpo.studyfile.budget import read_budget
from dvt_hpo.studyfile.cluster import read_cluster
from dvt_hpo.studyfile.command import check_command
from dvt_hpo.studyfile.defaults import derive_budget_settings
from dvt_hpo.studyfile.fields import Reader
from dvt_hpo.studyfile.objective import read_objective
from dvt_hpo.studyfile.search import read_search_space
from dvt_hpo.studyfile.seeding import read_seeding
from dvt_hpo.studyfile.study import check_algorithms, read_study, read_tracking
from dvt_hpo.studyfile.trainer import read_trainer
from dvt_hpo.studyfile.trials import check_packing, check_pause, read_trials
from dvt_hpo.text.redact import redact_url

__all__ = ["SECTIONS", "load_spec", "read_study_file", "spec_to_dict"]

SECTIONS = (
    "study",
    "objective",
    "trials",
    "batch_size",
    "trainer",
    "search_space",
    "tracking",
    "cluster",
)


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> StudySpec:
    """Read and validate a study file; ``overrides`` are ``--set PATH=VALUE`` strings.

    Overrides are parsed as YAML and applied to the file's tree before validation
    (``study.n_trials=20``, ``trainer.config.epochs=3``, ``search_space[0].high=0.5`` or
    ``search_space.0.high=0.5``). Raises :class:`SpecError` for the first problem found.
    Nothing is written anywhere.
    """
    return read_study_file(path, overrides)[1]


def read_study_file(path: str | Path, overrides: Sequence[str] = ()) -> tuple[Doc, StudySpec]:
    """:func:`load_spec`, with the file's :class:`Doc` (every node's line) beside the spec."""
    shown = str(path)
    absolute = Path(path).expanduser().resolve()
    parsed = [parse_override(text) for text in overrides]
    doc = Doc(shown)
    root = read_yaml(absolute, shown, doc, (), "the study file")
    if root is None:
        raise SpecError(
            "the study file is empty; it needs at least study, trainer and search_space", file=shown
        )
    if not isinstance(root, dict):
        raise SpecError(
            f"a study file must be a mapping of sections ({', '.join(SECTIONS)}), got "
            f"{describe(root)}",
            file=shown,
            line=doc.loc(())[1],
        )
    # Overrides into the trainer config wait until a config_file is read in.
    deferred = [o for o in parsed if o.parts[:2] == ("trainer", "config") and len(o.parts) > 2]
    for override in parsed:
        if override not in deferred:
            apply_override(doc, root, override)
    for name in root:
        if not isinstance(name, str) or name not in SECTIONS:
            raise doc.error(
                (name,),
                f"unknown section {name!r}{did_you_mean(str(name), SECTIONS)} (sections: "
                f"{', '.join(SECTIONS)})",
            )
    reader = Reader(doc, absolute, shown)
    trials_raw = root.get("trials")
    # The study's sampler defaults depend on how many trials run at once.
    raw = trials_raw if isinstance(trials_raw, Mapping) else {}
    # Left out with per_gpu K > 1, parallel is every share: K or more (read_trials).
    per_gpu = raw.get("per_gpu", 1)
    parallel = raw.get("parallel", per_gpu if isinstance(per_gpu, int) else 1)
    # The objective first: several objectives change the sampler and pruner defaults.
    objective = read_objective(reader, root)
    study = read_study(
        reader,
        root,
        parallel if isinstance(parallel, int) else 1,
        multi_objective=objective.is_multi,
        constrained=bool(objective.constraints),
    )
    trials = read_trials(reader, root, study.name)
    trainer, schema = read_trainer(reader, root, deferred)
    check_packing(reader, trials, trainer)
    dims = read_search_space(reader, root, schema, trainer.config, trainer.command)
    batch_size = read_batch_size(reader, root, schema, trainer.config, dims)
    check_command(reader, trainer, dims, batch_size)
    tracking = read_tracking(reader, root)
    study = read_seeding(reader, root, read_budget(reader, root, study, trials), dims)
    study = derive_budget_settings(study, trainer.config, dims)
    cluster = read_cluster(reader, root, trials.runs_dir)
    check_algorithms(reader, study, dims)
    check_pause(reader, trials, study, objective)
    spec = StudySpec(
        path=absolute,
        study=study,
        objective=objective,
        trials=trials,
        batch_size=batch_size,
        trainer=trainer,
        search_space=dims,
        tracking=tracking,
        cluster=cluster,
        locations={format_path(k): (f, line) for k, (f, line) in doc.locs.items()},
        overrides=tuple(overrides),
    )
    return doc, spec


def _plain(value: Any) -> Any:
    if isinstance(value, Condition):
        return {name: _plain(values) for name, values in value.equals.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def spec_to_dict(spec: StudySpec) -> dict[str, Any]:
    """A JSON-safe dict of ``spec`` (paths as strings, the storage URL's password redacted)."""
    data = _plain(spec)
    data.pop("locations", None)
    data.pop("overrides", None)
    data["study"]["storage"] = redact_url(spec.study.storage)
    if spec.study.warm_start is not None and spec.study.warm_start.storage is not None:
        data["study"]["warm_start"]["storage"] = redact_url(spec.study.warm_start.storage)
    return data
