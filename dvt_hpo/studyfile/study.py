"""Sections ``study`` (name, storage, budget, heartbeats, sampler and pruner) and ``tracking``
(``objective`` is :mod:`dvt_hpo.studyfile.objective`).

Plain fields are checked by the schema engine from :mod:`dvt_hpo.spec.model`; the code here
checks storage URLs, the share form of ``max_failures`` and sampler/pruner arguments against
the real Optuna class signatures, and fills every default (``grace_period_s``, TPE's
``constant_liar`` when trials run in parallel) so the runtime never fills one again.
"""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from dvt_hpo.config.hints import describe, did_you_mean
from dvt_hpo.config.source import Key
from dvt_hpo.exceptions import SpecError
from dvt_hpo.sampling import kinds, optuna_factory, space
from dvt_hpo.sampling.kinds import MULTI_OBJECTIVE_PRUNERS, default_algorithms
from dvt_hpo.sampling.optuna_factory import build_pruner, build_sampler
from dvt_hpo.spec.model import (
    Dimension,
    MlflowSpec,
    PlateauSpec,
    PrunerSpec,
    SamplerSpec,
    StudySection,
    TrackingSpec,
)
from dvt_hpo.studyfile.defaults import file_epochs
from dvt_hpo.studyfile.fields import Reader
from dvt_hpo.studyfile.urls import expand_env, resolve_url
from dvt_hpo.text.redact import redact_url

__all__ = ["check_algorithms", "check_multi_objective", "read_study", "read_tracking"]

STORAGE_DIALECTS = ("sqlite", "journal", "postgresql", "mysql", "mariadb", "oracle", "mssql")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_URL_RE = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://(?P<rest>.*)$", re.DOTALL)
# A grid larger than this is a mistake (a float step of 1e-6), and GridSampler lists it whole.
_MAX_GRID_POINTS = 1_000_000
# Parameters taking Python objects (callables, samplers, trials) cannot be written in YAML.
_OBJECT_ANNOTATIONS = (
    "Callable",
    "Sampler",
    "Pruner",
    "Mutation",
    "Crossover",
    "FrozenTrial",
    "Study",
    "ndarray",
)
_MAX_FAILURES_RULE = (
    "an integer >= 1 (a number of failed trials), a float in (0, 1) (a share of study.n_trials: "
    "the run stops after ceil(share * n_trials) failed trials) or null"
)


def read_study(
    r: Reader,
    root: Mapping[str, Any],
    parallel: int,
    *,
    multi_objective: bool = False,
    constrained: bool = False,
) -> StudySection:
    """``multi_objective``: the study has several objectives, so the sampler defaults to
    NSGA-II, pruning is off unless ``mo_asha`` is named (Optuna cannot prune multi-objective
    trials: ``Trial.report`` raises) and samplers and pruners for one objective are refused
    here. ``constrained``: the objective has constraints, so the sampler defaults to one that
    reads them (:func:`default_algorithms`)."""
    key: Key = ("study",)
    if "study" not in root:
        raise r.err(key, "missing required section 'study' (it needs at least a name)")
    raw = root["study"]
    if isinstance(raw, dict) and raw.get("grace_period_s", 0) is None:
        raw = {k: v for k, v in raw.items() if k != "grace_period_s"}  # null: the default
    sec = r.section(StudySection, raw, key, "section 'study'")
    name = sec["name"]
    if not _NAME_RE.match(name) or len(name) > 128:
        raise r.err(
            (*key, "name"),
            "must start with a letter or digit and hold only letters, digits, '.', '_' and "
            f"'-' (at most 128; it names files such as <name>.db), got {name!r}",
        )
    storage = read_storage(r, sec, key, name)
    n_trials = sec.get("n_trials")
    max_failures = read_max_failures(r, sec, key, n_trials)
    heartbeat = sec.get("heartbeat_interval_s", 10)
    grace = sec.get("grace_period_s", 2 * heartbeat)
    if grace <= heartbeat:
        raise r.err(
            (*key, "grace_period_s"),
            f"must be greater than heartbeat_interval_s ({heartbeat}), or a live trial would "
            f"be taken for dead between two heartbeats, got {grace}",
        )
    default_sampler, default_pruner = default_algorithms(
        multi_objective=multi_objective, constrained=constrained, epochs=file_epochs(root)
    )
    sampler_kind, sampler_kwargs = read_algorithm(
        r,
        sec,
        key,
        "sampler",
        default_sampler,
        kinds.SAMPLERS,
    )
    if multi_objective:
        check_multi_objective(r, sec, key, sampler_kind)
    # Written into the spec (TPE's constant liar), so the runtime never fills one again.
    sampler_kwargs = kinds.SAMPLERS[sampler_kind].parallel_kwargs(sampler_kwargs, parallel)
    pruner_kind, pruner_kwargs = read_algorithm(
        r,
        sec,
        key,
        "pruner",
        default_pruner,
        kinds.PRUNERS,
    )
    if pruner_kind in MULTI_OBJECTIVE_PRUNERS and not multi_objective:
        raise r.err(
            _kind_key(sec, key, "pruner"),
            f"pruner kind {pruner_kind!r} prunes studies with several objectives, and this "
            "study has one (objective.metric); list several under objective.metrics, or use "
            f"a pruner for one objective: {', '.join(_single_objective_pruners())}",
        )
    needs = kinds.PRUNERS[pruner_kind].needs_sampler
    if needs is not None and sampler_kind != needs:
        raise r.err(
            _kind_key(sec, key, "pruner"),
            f"pruner kind {pruner_kind!r} asks the sampler's GP for a trial's chance, so it "
            f"needs sampler kind {needs!r}, got sampler {sampler_kind!r}; set study.sampler to "
            f"{needs} or use another pruner",
        )
    return StudySection(
        name=name,
        storage=storage,
        n_trials=n_trials,
        timeout_s=sec.get("timeout_s"),
        sampler=SamplerSpec(sampler_kind, sampler_kwargs),
        pruner=PrunerSpec(pruner_kind, pruner_kwargs),
        max_failures=max_failures,
        heartbeat_interval_s=heartbeat,
        grace_period_s=grace,
        storage_retry_s=sec.get("storage_retry_s", 120.0),
        plateau=read_plateau(r, sec, key, multi_objective),
    )


def read_plateau(
    r: Reader, sec: Mapping[str, Any], key: Key, multi_objective: bool
) -> PlateauSpec | None:
    """``study.plateau: {trials: N, min_delta: d}`` (null or absent: no plateau rule)."""
    value = sec.get("plateau")
    if value is None:
        return None
    pkey = (*key, "plateau")
    if multi_objective:
        raise r.err(
            pkey,
            "a study with several objectives has no single best value to watch for a plateau; "
            "remove study.plateau",
        )
    fields = r.section(PlateauSpec, value, pkey, "study.plateau")
    return PlateauSpec(trials=fields["trials"], min_delta=float(fields.get("min_delta", 0.0)))


def read_storage(r: Reader, sec: Mapping[str, Any], key: Key, name: str) -> str:
    """The storage URL, relative sqlite and journal files resolved against the study folder."""
    fkey = (*key, "storage")
    value = sec.get("storage")
    if value is None:
        return f"sqlite:///{(r.dir / f'{name}.db').resolve()}"
    examples = (
        "'sqlite:///study.db' (relative to the study file), 'sqlite:////abs/study.db', "
        "'journal:///study.log' or 'postgresql://user:password@host/db'"
    )
    if not isinstance(value, str):
        raise r.err(fkey, f"must be a storage URL such as {examples}, got {describe(value)}")
    value = _expanded(r, fkey, value)
    shown = redact_url(value)
    match = _URL_RE.match(value.strip())
    if match is None:
        raise r.err(fkey, f"must be a storage URL such as {examples}, got {shown!r}")
    scheme = match["scheme"]
    dialect = scheme.split("+", 1)[0].lower()
    if dialect not in STORAGE_DIALECTS:
        raise r.err(
            fkey,
            f"unknown storage scheme {scheme!r} in {shown!r}{did_you_mean(dialect, STORAGE_DIALECTS)} "
            f"(supported: sqlite:///FILE, journal:///FILE, or a SQLAlchemy URL of "
            f"{', '.join(STORAGE_DIALECTS[2:])})",
        )
    if dialect in ("sqlite", "journal"):
        prefix = f"{dialect}:///"
        target = value[len(prefix) :].partition("?")[0] if value.startswith(prefix) else ""
        if target in ("", ":memory:"):
            raise r.err(
                fkey,
                f"{dialect} storage needs a file, shared by every worker and kept for resume: "
                f"'{prefix}relative/path' (relative to the study file's folder) or "
                f"'{prefix}/absolute/path', got {shown!r}",
            )
        return resolve_url(value, r.dir)
    if not match["rest"]:
        raise r.err(fkey, f"a {dialect} URL needs a host and a database, got {shown!r}")
    return value


def _expanded(r: Reader, fkey: Key, value: str) -> str:
    """``${VAR}`` and ``${VAR:-default}`` from the environment, so secrets stay out of study
    files (the expanded value is never shown: messages redact its password)."""
    try:
        return expand_env(value)
    except SpecError as exc:
        raise r.err(fkey, exc.message) from None


def read_max_failures(
    r: Reader, sec: Mapping[str, Any], key: Key, n_trials: int | None
) -> int | float | None:
    fkey = (*key, "max_failures")
    value = sec.get("max_failures")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise r.err(fkey, f"must be {_MAX_FAILURES_RULE}, got {describe(value)}")
    if isinstance(value, int):
        if value < 1:
            raise r.err(fkey, f"must be {_MAX_FAILURES_RULE}, got {value}")
        return value
    if not 0.0 < value < 1.0:
        raise r.err(fkey, f"must be {_MAX_FAILURES_RULE}, got {value!r}")
    if n_trials is None:
        raise r.err(
            fkey,
            f"a share ({value!r}) is a share of study.n_trials, which is null (no limit); set "
            "study.n_trials or give max_failures as a number of failed trials (an integer >= 1)",
        )
    return value


def _class_of(kind: str, is_sampler: bool) -> type:
    return optuna_factory.sampler_class(kind) if is_sampler else optuna_factory.pruner_class(kind)


def _parameters(kind: str, is_sampler: bool) -> Mapping[str, Any]:
    """The arguments a study file may give ``kind`` (empty when its package is missing)."""
    try:
        return optuna_factory.yaml_parameters(_class_of(kind, is_sampler))
    except (KeyError, ImportError):
        return {}


def read_algorithm(
    r: Reader,
    sec: Mapping[str, Any],
    key: Key,
    name: str,
    default_spec: SamplerSpec | PrunerSpec,
    classes: Mapping[str, kinds.Kind],
) -> tuple[str, dict[str, Any]]:
    """``sampler:``/``pruner:``: a kind string or ``{kind: ..., **kwargs}``. Without a kind,
    ``default_spec``'s kind and arguments, the file's arguments over them."""
    fkey = (*key, name)
    is_sampler = name == "sampler"
    default = default_spec.kind
    if name not in sec:
        return default, dict(default_spec.kwargs)
    value = sec[name]
    kind_key = fkey
    defaulted = False  # arguments written without a kind, over the default's
    if value is None:
        # `pruner: null` switches pruning off; `sampler: null` keeps the default.
        if is_sampler:
            kind, kwargs = default, dict(default_spec.kwargs)
        else:
            kind, kwargs = "none", {}
    elif isinstance(value, str):
        kind, kwargs = value, {}
    elif isinstance(value, dict):
        kwargs = dict(value)
        if "kind" in value:
            kind = kwargs.pop("kind")
            kind_key = (*fkey, "kind")
        else:
            kind, kwargs = default, {**default_spec.kwargs, **kwargs}
            defaulted = True
    else:
        raise r.err(
            fkey,
            f"must be a kind ({', '.join(classes)}) or a mapping such as "
            f"{{kind: {default}, ...}}, got {describe(value)}",
        )
    kinds = list(classes)
    if not isinstance(kind, str) or kind not in classes:
        hint = did_you_mean(kind, kinds) if isinstance(kind, str) else ""
        raise r.err(
            kind_key, f"unknown {name} kind {describe(kind)}{hint} (kinds: {', '.join(kinds)})"
        )
    row = classes[kind]
    missing = optuna_factory.missing_packages(row.packages)
    if missing:
        noun = "package" if len(missing) == 1 else "packages"
        raise r.err(
            kind_key,
            f"{name} kind {kind!r} needs the {noun} {' and '.join(map(repr, missing))}: "
            f"pip install {' '.join(missing)}",
        )
    try:
        cls = _class_of(kind, is_sampler)
    except KeyError as exc:  # pragma: no cover - depends on the Optuna release
        raise r.err(kind_key, str(exc.args[0])) from None
    params = optuna_factory.yaml_parameters(cls)
    built = row.built
    accepted = [p for p in params if p not in built]
    what = f"{cls.__name__} ({name} kind {kind!r})"
    if defaulted:
        what = f"{cls.__name__} (the default {name} of this study, kind {kind!r})"
    for arg, arg_value in kwargs.items():
        akey = (*fkey, arg)
        if not isinstance(arg, str) or arg not in params:
            listing = ", ".join(accepted) if accepted else "none"
            # Arguments without a kind go over the default's, which follows the study's shape
            # (a short training has no pruner): say which kinds would take the argument.
            takers = [k for k in classes if defaulted and arg in _parameters(k, is_sampler)]
            named = f"; name a kind that takes it: {', '.join(takers)}" if takers else ""
            raise r.err(
                akey,
                f"unknown argument {arg!r} for {what}{did_you_mean(str(arg), accepted)} "
                f"(accepted: {listing}){named}",
            )
        if arg in built:
            raise r.err(akey, f"{arg!r} of {what} is built from search_space by dvt-hpo; remove it")
        text = _annotation_text(params[arg])
        if any(word in text for word in _OBJECT_ANNOTATIONS):
            raise r.err(
                akey,
                f"{arg!r} of {what} takes a Python object ({text}), which study.yaml cannot "
                "express; leave it out",
            )
        if text and _annotation_accepts(text, arg_value) is False:
            raise r.err(akey, f"{arg!r} of {what} takes {text}, got {describe(arg_value)}")
    for arg, param in params.items():
        if param.default is inspect.Parameter.empty and arg not in built and arg not in kwargs:
            raise r.err(kind_key, f"{what} needs the argument {arg!r}")
    if kind == "threshold" and kwargs.get("lower") is None and kwargs.get("upper") is None:
        raise r.err(kind_key, "pruner kind 'threshold' needs 'lower' or 'upper' (or both)")
    return kind, kwargs


def check_multi_objective(r: Reader, sec: Mapping[str, Any], key: Key, sampler: str) -> None:
    """What a study with several objectives cannot have: a sampler that refuses them, or a
    pruner for one objective (Optuna raises on ``Trial.report`` in multi-objective studies);
    an unknown kind is left to :func:`read_algorithm`'s did-you-mean."""
    if not optuna_factory.supports_multi_objective(sampler):
        raise r.err(
            _kind_key(sec, key, "sampler"),
            f"sampler kind {sampler!r} supports one objective only, and objective.metrics lists "
            f"several; use {_several_objectives_text()}",
        )
    pruner = sec.get("pruner")
    kind = pruner.get("kind") if isinstance(pruner, dict) else pruner
    allowed = (None, "none", *MULTI_OBJECTIVE_PRUNERS)
    if "pruner" in sec and isinstance(kind, str) and kind not in allowed and kind in kinds.PRUNERS:
        raise r.err(
            _kind_key(sec, key, "pruner"),
            "a study with several objectives cannot be pruned by a pruner for one objective "
            "(Optuna does not support pruning for multi-objective studies: Trial.report "
            f"raises), got pruner {describe(kind)}; use "
            f"{' or '.join(map(repr, MULTI_OBJECTIVE_PRUNERS))} (stops a trial dominated by "
            "the others at its rung), or remove study.pruner or set it to none",
        )


def _single_objective_pruners() -> list[str]:
    return [k for k in kinds.PRUNERS if k not in MULTI_OBJECTIVE_PRUNERS]


def _several_objectives_text() -> str:
    """``nsga2 (the default), nsga3, tpe, ...``: the samplers for several objectives."""
    default, *others = kinds.kinds_for_several_objectives()
    return f"{default} (the default), " + ", ".join(others[:-1]) + f" or {others[-1]}"


def _kind_key(sec: Mapping[str, Any], key: Key, name: str) -> Key:
    value = sec.get(name)
    return (*key, name, "kind") if isinstance(value, dict) and "kind" in value else (*key, name)


def read_tracking(r: Reader, root: Mapping[str, Any]) -> TrackingSpec:
    key: Key = ("tracking",)
    sec = r.section(TrackingSpec, root.get("tracking"), key, "section 'tracking'")
    if sec.get("mlflow") is None:
        return TrackingSpec()
    mkey = (*key, "mlflow")
    mlflow = r.section(MlflowSpec, sec["mlflow"], mkey, "tracking.mlflow")
    uri = mlflow.get("tracking_uri")
    if uri is not None:
        uri = _expanded(r, (*mkey, "tracking_uri"), uri)
        if uri.startswith("sqlite:///"):
            uri = resolve_url(uri, r.dir)
        elif "://" not in uri and not uri.startswith("file:"):
            # A plain folder is MLflow's file store; anchor it like every other path.
            uri = str(r.resolve(uri))
    return TrackingSpec(mlflow=MlflowSpec(tracking_uri=uri, experiment=mlflow.get("experiment")))


def check_algorithms(r: Reader, study: StudySection, dims: Sequence[Dimension]) -> None:
    """Build the sampler and pruner once, so Optuna's own argument checks run now."""
    sampler_key: Key = ("study", "sampler")
    if study.sampler.kind == "grid":
        total = 1
        for i, dim in enumerate(dims):
            size = space.grid_size(dim)
            if size is None:
                raise r.err(
                    ("search_space", i),
                    f"sampler kind 'grid' needs every dimension enumerable, but float "
                    f"dimension {dim.name!r} has no step; give it a step or make it "
                    "categorical",
                )
            total *= size
        if total > _MAX_GRID_POINTS:
            raise r.err(
                sampler_key,
                f"the grid has {total} points, more than {_MAX_GRID_POINTS}; use coarser "
                "steps or another sampler",
            )
    checks: list[tuple[Key, Any]] = [(("study", "pruner"), lambda: build_pruner(study.pruner))]
    # GPSampler is left out: its constructor may import torch in some Optuna releases.
    if study.sampler.kind != "gp":
        checks.append((sampler_key, lambda: build_sampler(study.sampler, dims)))
    for key, build in checks:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                build()
        except (ValueError, TypeError) as exc:
            ours = key[-1] == "pruner" and study.pruner.kind in MULTI_OBJECTIVE_PRUNERS
            who = "MOASHAPruner" if ours else "Optuna"
            raise r.err(key, f"{who} rejects the arguments: {exc}") from None


def _annotation_text(param: inspect.Parameter) -> str:
    annotation = param.annotation
    if annotation is inspect.Parameter.empty:
        return ""
    if isinstance(annotation, str):
        return annotation
    return getattr(annotation, "__name__", None) or str(annotation)


def _annotation_accepts(text: str, value: Any) -> bool | None:
    """Whether ``value`` fits the annotation ``text`` (``None``: the annotation is not simple)."""
    for token in (t.strip() for t in text.split("|")):
        if token == "Any":
            return True
        if token == "None":
            ok = value is None
        elif token == "bool":
            ok = isinstance(value, bool)
        elif token == "int":
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif token == "float":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif token == "str":
            ok = isinstance(value, str)
        elif token.startswith(("dict", "Mapping")):
            ok = isinstance(value, dict)
        elif token.startswith(("list", "Sequence", "tuple")):
            ok = isinstance(value, list)
        else:
            return None
        if ok:
            return True
    return False
