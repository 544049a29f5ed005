"""study.yaml -> typed, validated :class:`StudySpec`.

CONTRACT (the runner and the CLI rely on these names; extend, do not rename).
Parsing/validation is implemented below the dataclasses.

:func:`load_spec` reads the file with PyYAML's node tree, so every value keeps its line, and
checks it section by section; the first problem raises :class:`~dvt_hpo.exceptions.SpecError`
naming the file, the line, the dotted field (``search_space[2].low``), the rule and the value,
with the closest valid name for a misspelt key, kind or path. Loading writes nothing anywhere.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import importlib
import inspect
import math
import re
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from dvt_hpo import optuna_factory, space
from dvt_hpo.exceptions import SpecError
from dvt_hpo.optuna_factory import build_pruner, build_sampler
from dvt_hpo.storage import redact_url, resolve_url
from dvt_hpo.units import format_bytes, parse_bytes

__all__ = [
    "BUILTIN_ENTRYPOINT",
    "BatchSizeSpec",
    "Condition",
    "Dimension",
    "MlflowSpec",
    "ObjectiveSpec",
    "PrunerSpec",
    "SamplerSpec",
    "StudySection",
    "StudySpec",
    "TrackingSpec",
    "TrainerSpec",
    "TrialsSpec",
    "build_pruner",
    "build_sampler",
    "load_spec",
    "spec_to_dict",
]


@dataclass(frozen=True)
class SamplerSpec:
    kind: str = "tpe"  # tpe | random | cmaes | qmc | gp | grid | nsga2
    kwargs: dict[str, Any] = field(default_factory=dict)  # passed to the Optuna class (seed, ...)


@dataclass(frozen=True)
class PrunerSpec:
    kind: str = "median"  # median | percentile | successive_halving | hyperband | threshold | wilcoxon | none
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StudySection:
    name: str
    storage: str  # resolved URL (relative sqlite/journal paths made absolute against the file)
    n_trials: int | None = None  # total for the study, across workers and resumes
    timeout_s: float | None = None  # for this invocation
    sampler: SamplerSpec = field(default_factory=SamplerSpec)
    pruner: PrunerSpec = field(default_factory=PrunerSpec)
    max_failures: int | float | None = None  # count (int >= 1) or ratio (0 < float < 1)
    heartbeat_interval_s: int = 10
    grace_period_s: int | None = None  # default: 2 * heartbeat_interval_s


@dataclass(frozen=True)
class ObjectiveSpec:
    metric: str = "loss"
    direction: Literal["minimize", "maximize"] = "minimize"
    reduce: Literal["best", "last"] = "best"


@dataclass(frozen=True)
class TrialsSpec:
    launcher: Literal["process", "torchrun"] = "process"
    nproc_per_node: int = 1
    parallel: int = 1
    devices: Any = "auto"  # auto | cpu | int | [0, 1] | "0,1" | "cuda:0,1" | "cuda:2"
    timeout_s: float | None = None
    stop_grace_s: float = 10.0
    max_retries: int = 1
    memory_limit: int | None = None  # bytes (parsed from "4GiB", "512MB", ints)
    report_timeout_s: float = 60.0  # bounded wait in ctx.report for the orchestrator's decision
    runs_dir: Path | None = None  # resolved; default <study file folder>/runs/<study name>


@dataclass(frozen=True)
class BatchSizeSpec:
    auto: bool = False
    path: str = "data.batch_size"
    min: int = 1
    max: int = 1024
    start: int | None = None  # default: min
    multiple_of: int = 1
    tolerance: float = 0.02
    effective: int | None = None
    accumulate_path: str = "precision.accumulate_steps"
    memory_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class TrainerSpec:
    entrypoint: str = "dvt_hpo.train:run"
    config: dict[str, Any] = field(default_factory=dict)  # normalized full config (defaults filled)
    config_file: Path | None = None
    schema: str | None = None  # "module:DataclassType"; default TrainerConfig for the built-in


@dataclass(frozen=True)
class Condition:
    """``when:`` of a dimension: every named earlier dimension has one of the listed values."""

    equals: dict[str, tuple[Any, ...]]


@dataclass(frozen=True)
class Dimension:
    name: str
    kind: Literal["float", "int", "categorical", "bool"]
    path: str
    low: float | int | None = None
    high: float | int | None = None
    step: float | int | None = None
    log: bool = False
    choices: tuple[Any, ...] | None = None
    when: Condition | None = None


@dataclass(frozen=True)
class MlflowSpec:
    tracking_uri: str | None = None
    experiment: str | None = None


@dataclass(frozen=True)
class TrackingSpec:
    mlflow: MlflowSpec | None = None


@dataclass(frozen=True)
class StudySpec:
    path: Path  # the study file (absolute)
    study: StudySection
    objective: ObjectiveSpec
    trials: TrialsSpec
    batch_size: BatchSizeSpec
    trainer: TrainerSpec
    search_space: tuple[Dimension, ...]
    tracking: TrackingSpec = field(default_factory=TrackingSpec)


# ---------------------------------------------------------------------------------------------
# Constants: the accepted keys of every section (the order is the one shown in messages).

BUILTIN_ENTRYPOINT = "dvt_hpo.train:run"
OVERRIDE_SOURCE = "<--set>"

SECTIONS = ("study", "objective", "trials", "batch_size", "trainer", "search_space", "tracking")
STUDY_KEYS = (
    "name",
    "storage",
    "n_trials",
    "timeout_s",
    "sampler",
    "pruner",
    "max_failures",
    "heartbeat_interval_s",
    "grace_period_s",
)
OBJECTIVE_KEYS = ("metric", "direction", "reduce")
TRIALS_KEYS = (
    "launcher",
    "nproc_per_node",
    "parallel",
    "devices",
    "timeout_s",
    "stop_grace_s",
    "max_retries",
    "memory_limit",
    "report_timeout_s",
    "runs_dir",
)
BATCH_SIZE_KEYS = (
    "auto",
    "path",
    "min",
    "max",
    "start",
    "multiple_of",
    "tolerance",
    "effective",
    "memory_keys",
    "accumulate_path",
)
TRAINER_KEYS = ("entrypoint", "config", "config_file", "schema")
DIMENSION_KEYS = ("name", "kind", "path", "low", "high", "step", "log", "choices", "when")
DIMENSION_KINDS = ("float", "int", "categorical", "bool")
_KIND_KEYS: dict[str, tuple[str, ...]] = {
    "float": ("low", "high", "step", "log"),
    "int": ("low", "high", "step", "log"),
    "categorical": ("choices",),
    "bool": (),
}
TRACKING_KEYS = ("mlflow",)
MLFLOW_KEYS = ("tracking_uri", "experiment")
STORAGE_DIALECTS = ("sqlite", "journal", "postgresql", "mysql", "mariadb", "oracle", "mssql")

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ENTRYPOINT_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_URL_RE = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://(?P<rest>.*)$", re.DOTALL)
_GPU_LIST_RE = re.compile(r"^\d+(\s*,\s*\d+)*$")
# Below this a byte count is almost surely a unit mistake (``memory_limit: 4096`` meant MiB).
_MIN_MEMORY_LIMIT = 16 * 1024**2
# A grid larger than this is a mistake (a float step of 1e-6), and GridSampler lists it whole.
_MAX_GRID_POINTS = 1_000_000
# Optuna's categorical choices: anything else is stored by repr and compares badly.
_CHOICE_TYPES = (type(None), bool, int, float, str)
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

Key = tuple[Any, ...]
Loc = tuple[str, "int | None"]


# ---------------------------------------------------------------------------------------------
# Messages


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


def _hint(word: str, options: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, [str(o) for o in options], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


# ---------------------------------------------------------------------------------------------
# YAML with the line of every key and value


class _YamlLoader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-4`` as a float, as YAML 1.2 and users expect."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


class _Doc:
    """Where every node of the raw tree comes from: ``{key tuple: (file, line)}``."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.locs: dict[Key, Loc] = {}

    def loc(self, key: Key) -> Loc:
        # The deepest known ancestor: a missing key is reported at its section's line.
        for n in range(len(key), -1, -1):
            found = self.locs.get(tuple(key[:n]))
            if found is not None:
                return found
        return (self.file, None)

    def error(self, key: Key, message: str) -> SpecError:
        file, line = self.loc(key)
        return SpecError(message, file=file, line=line, field=space.format_path(key) or None)

    def forget(self, key: Key) -> None:
        for known in [k for k in self.locs if k[: len(key)] == key]:
            del self.locs[known]


def _yaml_error(exc: yaml.YAMLError, file: str) -> SpecError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else None
    parts = [getattr(exc, "context", None), getattr(exc, "problem", None)]
    text = ", ".join(p for p in parts if p) or str(exc)
    return SpecError(f"invalid YAML: {text}", file=file, line=line)


def _construct(
    loader: _YamlLoader, node: yaml.Node, key: Key, doc: _Doc, file: str, active: set[int]
) -> Any:
    line = node.start_mark.line + 1
    doc.locs.setdefault(key, (file, line))
    if id(node) in active:
        raise SpecError("recursive YAML alias", file=file, line=line)
    if isinstance(node, yaml.MappingNode):
        active.add(id(node))
        loader.flatten_mapping(node)  # `<<: *anchor` merge keys
        out: dict[Any, Any] = {}
        own_lines: dict[Any, int] = {}
        for key_node, value_node in node.value:
            name = loader.construct_object(key_node, deep=True)
            key_line = key_node.start_mark.line + 1
            try:
                hash(name)
            except TypeError:
                raise SpecError(
                    f"mapping keys must be plain scalars, got {_describe(name)}",
                    file=file,
                    line=key_line,
                ) from None
            # Keys merged from an anchor live outside this node and may be overridden; two
            # keys written in this mapping are a mistake that PyYAML would silently resolve.
            own = node.start_mark.index <= key_node.start_mark.index <= node.end_mark.index
            if own and name in own_lines:
                raise SpecError(
                    f"duplicate key {name!r} (first given at line {own_lines[name]})",
                    file=file,
                    line=key_line,
                    field=space.format_path((*key, name)),
                )
            if own:
                own_lines[name] = key_line
            child = (*key, name)
            doc.forget(child)
            doc.locs[child] = (file, key_line)
            out[name] = _construct(loader, value_node, child, doc, file, active)
        active.discard(id(node))
        return out
    if isinstance(node, yaml.SequenceNode):
        active.add(id(node))
        items = []
        for i, item in enumerate(node.value):
            doc.locs[(*key, i)] = (file, item.start_mark.line + 1)
            items.append(_construct(loader, item, (*key, i), doc, file, active))
        active.discard(id(node))
        return items
    return loader.construct_object(node, deep=True)


def _read_yaml(path: Path, shown: str, doc: _Doc, prefix: Key, what: str) -> Any:
    """Parse the YAML file ``path`` and record the line of every node under ``prefix``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read {what}: {exc.strerror or exc}", file=shown) from None
    loader = _YamlLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        return _construct(loader, node, prefix, doc, shown, set())
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, shown) from None
    finally:
        loader.dispose()


# ---------------------------------------------------------------------------------------------
# --set overrides


@dataclass(frozen=True)
class _Override:
    text: str
    parts: tuple[str | int, ...]
    value: Any


def _parse_override(text: str) -> _Override:
    if not isinstance(text, str) or "=" not in text:
        raise SpecError(
            f"expected PATH=VALUE such as study.n_trials=20 or search_space[0].high=0.5, "
            f"got {text!r}",
            file=OVERRIDE_SOURCE,
        )
    path, _, raw = text.partition("=")
    path = path.strip()
    try:
        parts = space.parse_path(path)
    except KeyError as exc:
        raise SpecError(
            f"malformed path in {text!r}: {exc}", file=OVERRIDE_SOURCE, field=path or None
        ) from None
    try:
        value = yaml.load(raw, Loader=_YamlLoader) if raw.strip() else None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(
            f"the value of {text!r} is not valid YAML: {problem}", file=OVERRIDE_SOURCE, field=path
        ) from None
    return _Override(text, tuple(parts), value)


def _apply_override(doc: _Doc, root: dict[str, Any], override: _Override) -> None:
    """Write one override into the raw tree; its subtree is then reported as ``<--set>``."""
    node: Any = root
    walked: list[str | int] = []
    for i, part in enumerate(override.parts):
        here = space.format_path(walked) or "the top level"
        if isinstance(node, list):
            if isinstance(part, str) and part.isdigit():
                part = int(part)
            if not isinstance(part, int):
                raise SpecError(
                    f"{here} is a list, so the next segment must be an index (0..{len(node) - 1}), "
                    f"got {part!r} in {override.text!r}",
                    file=OVERRIDE_SOURCE,
                    field=space.format_path([*walked, part]),
                )
            if not 0 <= part < len(node):
                raise SpecError(
                    f"index {part} is out of range: {here} has {len(node)} item{'s' if len(node) != 1 else ''} "
                    f"(0..{len(node) - 1}), in {override.text!r}",
                    file=OVERRIDE_SOURCE,
                    field=space.format_path([*walked, part]),
                )
        elif isinstance(node, dict):
            if isinstance(part, int):
                raise SpecError(
                    f"{here} is a mapping, not a list, so [{part}] does not apply, in "
                    f"{override.text!r}",
                    file=OVERRIDE_SOURCE,
                    field=space.format_path([*walked, part]),
                )
        else:
            raise SpecError(
                f"cannot set {space.format_path(override.parts)!r}: {here} is "
                f"{_describe(node)}, not a mapping or a list",
                file=OVERRIDE_SOURCE,
                field=space.format_path(walked),
            )
        walked.append(part)
        if i == len(override.parts) - 1:
            node[part] = override.value
        else:
            child = node[part] if isinstance(node, list) else node.get(part)
            if child is None:
                child = {}
                node[part] = child
                doc.forget(tuple(walked))
                doc.locs[tuple(walked)] = (OVERRIDE_SOURCE, None)
            node = child
    key = tuple(walked)
    doc.forget(key)
    doc.locs[key] = (OVERRIDE_SOURCE, None)


# ---------------------------------------------------------------------------------------------
# Optuna class signatures


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


# ---------------------------------------------------------------------------------------------
# Builder: one method per section


@contextlib.contextmanager
def _import_context(folder: Path) -> Iterator[None]:
    """The study's folder importable (last, so installed packages win) and no ``.pyc`` written."""
    old_path = list(sys.path)
    old_bytecode = sys.dont_write_bytecode
    sys.path.append(str(folder))
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.path[:] = old_path
        sys.dont_write_bytecode = old_bytecode


def _conditions_exclusive(a: Condition | None, b: Condition | None) -> bool:
    """Whether two conditions can never hold together (a shared dimension, disjoint values)."""
    if a is None or b is None:
        return False
    for name, values in a.equals.items():
        other = b.equals.get(name)
        if other is not None and not any(space.same_value(x, y) for x in values for y in other):
            return True
    return False


class _Builder:
    def __init__(self, doc: _Doc, path: Path, shown: str) -> None:
        self.doc = doc
        self.path = path  # absolute
        self.dir = path.parent
        self.shown_dir = Path(shown).parent

    # -- generic checks ------------------------------------------------------------------------

    def err(self, key: Key, message: str) -> SpecError:
        return self.doc.error(key, message)

    def section(self, value: Any, key: Key, allowed: Sequence[str], what: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.err(key, f"{what} must be a mapping, got {_describe(value)}")
        for name in value:
            if not isinstance(name, str) or name not in allowed:
                raise self.err(
                    (*key, name),
                    f"unknown key {name!r} in {what}{_hint(str(name), allowed)} "
                    f"(allowed keys: {', '.join(allowed)})",
                )
        return value

    def integer(
        self,
        sec: Mapping[str, Any],
        key: Key,
        name: str,
        default: int | None,
        *,
        min_value: int | None = None,
        null: bool = False,
    ) -> int | None:
        if name not in sec:
            return default
        value = sec[name]
        rule = "an integer" + (f" >= {min_value}" if min_value is not None else "")
        rule += " or null" if null else ""
        if value is None and null:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.err((*key, name), f"must be {rule}, got {_describe(value)}")
        if min_value is not None and value < min_value:
            raise self.err((*key, name), f"must be {rule}, got {value}")
        return value

    def number(
        self,
        sec: Mapping[str, Any],
        key: Key,
        name: str,
        default: float | None,
        *,
        gt: float | None = None,
        ge: float | None = None,
        le: float | None = None,
        null: bool = False,
    ) -> float | None:
        if name not in sec:
            return default
        value = sec[name]
        bounds = []
        if gt is not None:
            bounds.append(f"> {gt:g}")
        if ge is not None:
            bounds.append(f">= {ge:g}")
        if le is not None:
            bounds.append(f"<= {le:g}")
        rule = "a number" + (" " + " and ".join(bounds) if bounds else "")
        rule += " or null" if null else ""
        if value is None and null:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.err((*key, name), f"must be {rule}, got {_describe(value)}")
        if (
            not math.isfinite(value)
            or (gt is not None and not value > gt)
            or (ge is not None and not value >= ge)
            or (le is not None and not value <= le)
        ):
            raise self.err((*key, name), f"must be {rule}, got {value!r}")
        return float(value)

    def boolean(self, sec: Mapping[str, Any], key: Key, name: str, default: bool) -> bool:
        if name not in sec:
            return default
        value = sec[name]
        if not isinstance(value, bool):
            raise self.err((*key, name), f"must be true or false, got {_describe(value)}")
        return value

    def string(
        self,
        sec: Mapping[str, Any],
        key: Key,
        name: str,
        default: str | None,
        *,
        null: bool = False,
        what: str = "a non-empty string",
    ) -> str | None:
        if name not in sec:
            return default
        value = sec[name]
        if value is None and null:
            return None
        if not isinstance(value, str) or not value.strip():
            rule = what + (" or null" if null else "")
            raise self.err((*key, name), f"must be {rule}, got {_describe(value)}")
        return value

    def choice(
        self, sec: Mapping[str, Any], key: Key, name: str, default: str, allowed: Sequence[str]
    ) -> str:
        if name not in sec:
            return default
        value = sec[name]
        if not isinstance(value, str) or value not in allowed:
            hint = _hint(value, allowed) if isinstance(value, str) else ""
            raise self.err(
                (*key, name),
                f"must be one of {', '.join(allowed)}, got {_describe(value)}{hint}",
            )
        return value

    def dotted(self, value: Any, key: Key) -> str:
        if not isinstance(value, str) or not value:
            raise self.err(
                key, f"must be a dotted path such as 'data.batch_size', got {_describe(value)}"
            )
        try:
            space.parse_path(value)
        except KeyError as exc:
            raise self.err(key, f"malformed dotted path: {exc}") from None
        return value

    # -- study ----------------------------------------------------------------------------------

    def study(self, root: Mapping[str, Any]) -> StudySection:
        key: Key = ("study",)
        if "study" not in root:
            raise self.err(key, "missing required section 'study' (it needs at least a name)")
        sec = self.section(root["study"], key, STUDY_KEYS, "section 'study'")
        if "name" not in sec:
            raise self.err((*key, "name"), "missing required key 'name' in section 'study'")
        name = self.string(sec, key, "name", None)
        assert name is not None
        if not _NAME_RE.match(name) or len(name) > 128:
            raise self.err(
                (*key, "name"),
                "must start with a letter or digit and hold only letters, digits, '.', '_' and "
                f"'-' (at most 128; it names files such as <name>.db), got {name!r}",
            )
        storage = self.storage(sec, key, name)
        n_trials = self.integer(sec, key, "n_trials", None, min_value=1, null=True)
        timeout_s = self.number(sec, key, "timeout_s", None, gt=0, null=True)
        max_failures = self.max_failures(sec, key)
        heartbeat = self.integer(sec, key, "heartbeat_interval_s", 10, min_value=1)
        assert heartbeat is not None
        grace = self.integer(sec, key, "grace_period_s", None, min_value=1, null=True)
        if grace is not None and grace <= heartbeat:
            raise self.err(
                (*key, "grace_period_s"),
                f"must be greater than heartbeat_interval_s ({heartbeat}), or a live trial would "
                f"be taken for dead between two heartbeats, got {grace}",
            )
        sampler_kind, sampler_kwargs = self.algorithm(
            sec, key, "sampler", "tpe", optuna_factory.SAMPLER_CLASSES
        )
        pruner_kind, pruner_kwargs = self.algorithm(
            sec, key, "pruner", "median", optuna_factory.PRUNER_CLASSES
        )
        return StudySection(
            name=name,
            storage=storage,
            n_trials=n_trials,
            timeout_s=timeout_s,
            sampler=SamplerSpec(sampler_kind, sampler_kwargs),
            pruner=PrunerSpec(pruner_kind, pruner_kwargs),
            max_failures=max_failures,
            heartbeat_interval_s=heartbeat,
            grace_period_s=grace if grace is not None else 2 * heartbeat,
        )

    def storage(self, sec: Mapping[str, Any], key: Key, name: str) -> str:
        fkey = (*key, "storage")
        value = sec.get("storage")
        if value is None:
            return f"sqlite:///{(self.dir / f'{name}.db').resolve()}"
        examples = (
            "'sqlite:///study.db' (relative to the study file), 'sqlite:////abs/study.db', "
            "'journal:///study.log' or 'postgresql://user:password@host/db'"
        )
        if not isinstance(value, str):
            raise self.err(
                fkey, f"must be a storage URL such as {examples}, got {_describe(value)}"
            )
        shown = redact_url(value)
        match = _URL_RE.match(value.strip())
        if match is None:
            raise self.err(fkey, f"must be a storage URL such as {examples}, got {shown!r}")
        scheme = match["scheme"]
        dialect = scheme.split("+", 1)[0].lower()
        if dialect not in STORAGE_DIALECTS:
            raise self.err(
                fkey,
                f"unknown storage scheme {scheme!r} in {shown!r}{_hint(dialect, STORAGE_DIALECTS)} "
                f"(supported: sqlite:///FILE, journal:///FILE, or a SQLAlchemy URL of "
                f"{', '.join(STORAGE_DIALECTS[2:])})",
            )
        if dialect in ("sqlite", "journal"):
            prefix = f"{dialect}:///"
            target = value[len(prefix) :].partition("?")[0] if value.startswith(prefix) else ""
            if target in ("", ":memory:"):
                raise self.err(
                    fkey,
                    f"{dialect} storage needs a file, shared by every worker and kept for resume: "
                    f"'{prefix}relative/path' (relative to the study file's folder) or "
                    f"'{prefix}/absolute/path', got {shown!r}",
                )
            return resolve_url(value, self.dir)
        if not match["rest"]:
            raise self.err(fkey, f"a {dialect} URL needs a host and a database, got {shown!r}")
        return value

    def max_failures(self, sec: Mapping[str, Any], key: Key) -> int | float | None:
        value = sec.get("max_failures")
        rule = (
            "an integer >= 1 (a number of failed trials), a float in (0, 1) (a fraction of "
            "finished trials) or null"
        )
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.err((*key, "max_failures"), f"must be {rule}, got {_describe(value)}")
        if isinstance(value, int):
            if value < 1:
                raise self.err((*key, "max_failures"), f"must be {rule}, got {value}")
            return value
        if not 0.0 < value < 1.0:
            raise self.err((*key, "max_failures"), f"must be {rule}, got {value!r}")
        return value

    def algorithm(
        self,
        sec: Mapping[str, Any],
        key: Key,
        name: str,
        default: str,
        classes: Mapping[str, str],
    ) -> tuple[str, dict[str, Any]]:
        """``sampler:``/``pruner:``: a kind string or ``{kind: ..., **kwargs}``."""
        fkey = (*key, name)
        is_sampler = name == "sampler"
        if name not in sec:
            return default, {}
        value = sec[name]
        kind_key = fkey
        if value is None:
            # `pruner: null` switches pruning off; `sampler: null` keeps the default.
            kind, kwargs = ("tpe" if is_sampler else "none"), {}
        elif isinstance(value, str):
            kind, kwargs = value, {}
        elif isinstance(value, dict):
            kwargs = dict(value)
            kind = kwargs.pop("kind", default)
            if "kind" in value:
                kind_key = (*fkey, "kind")
        else:
            raise self.err(
                fkey,
                f"must be a kind ({', '.join(classes)}) or a mapping such as "
                f"{{kind: {default}, ...}}, got {_describe(value)}",
            )
        kinds = list(classes)
        if not isinstance(kind, str) or kind not in classes:
            hint = _hint(kind, kinds) if isinstance(kind, str) else ""
            raise self.err(
                kind_key, f"unknown {name} kind {_describe(kind)}{hint} (kinds: {', '.join(kinds)})"
            )
        packages = optuna_factory.SAMPLER_PACKAGES if is_sampler else optuna_factory.PRUNER_PACKAGES
        missing = optuna_factory.missing_packages(packages.get(kind, ()))
        if missing:
            noun = "package" if len(missing) == 1 else "packages"
            raise self.err(
                kind_key,
                f"{name} kind {kind!r} needs the {noun} {' and '.join(map(repr, missing))}: "
                f"pip install {' '.join(missing)}",
            )
        try:
            cls = (
                optuna_factory.sampler_class(kind)
                if is_sampler
                else optuna_factory.pruner_class(kind)
            )
        except KeyError as exc:  # pragma: no cover - depends on the Optuna release
            raise self.err(kind_key, str(exc.args[0])) from None
        params = optuna_factory.yaml_parameters(cls)
        built = optuna_factory.BUILT_ARGUMENTS.get(kind, ()) if is_sampler else ()
        accepted = [p for p in params if p not in built]
        what = f"{cls.__name__} ({name} kind {kind!r})"
        for arg, arg_value in kwargs.items():
            akey = (*fkey, arg)
            if not isinstance(arg, str) or arg not in params:
                listing = ", ".join(accepted) if accepted else "none"
                raise self.err(
                    akey,
                    f"unknown argument {arg!r} for {what}{_hint(str(arg), accepted)} "
                    f"(accepted: {listing})",
                )
            if arg in built:
                raise self.err(
                    akey, f"{arg!r} of {what} is built from search_space by dvt-hpo; remove it"
                )
            text = _annotation_text(params[arg])
            if any(word in text for word in _OBJECT_ANNOTATIONS):
                raise self.err(
                    akey,
                    f"{arg!r} of {what} takes a Python object ({text}), which study.yaml cannot "
                    "express; leave it out",
                )
            if text and _annotation_accepts(text, arg_value) is False:
                raise self.err(akey, f"{arg!r} of {what} takes {text}, got {_describe(arg_value)}")
        for arg, param in params.items():
            if param.default is inspect.Parameter.empty and arg not in built and arg not in kwargs:
                raise self.err(kind_key, f"{what} needs the argument {arg!r}")
        if kind == "threshold" and kwargs.get("lower") is None and kwargs.get("upper") is None:
            raise self.err(kind_key, "pruner kind 'threshold' needs 'lower' or 'upper' (or both)")
        return kind, kwargs

    # -- objective ------------------------------------------------------------------------------

    def objective(self, root: Mapping[str, Any]) -> ObjectiveSpec:
        key: Key = ("objective",)
        sec = self.section(root.get("objective"), key, OBJECTIVE_KEYS, "section 'objective'")
        metric = self.string(sec, key, "metric", "loss", what="a metric name")
        assert metric is not None
        default_direction = "minimize" if "loss" in metric.lower() else "maximize"
        direction = self.choice(sec, key, "direction", default_direction, ("minimize", "maximize"))
        reduce = self.choice(sec, key, "reduce", "best", ("best", "last"))
        return ObjectiveSpec(metric=metric, direction=direction, reduce=reduce)  # type: ignore[arg-type]

    # -- trials ---------------------------------------------------------------------------------

    def trials(self, root: Mapping[str, Any], study_name: str) -> TrialsSpec:
        key: Key = ("trials",)
        sec = self.section(root.get("trials"), key, TRIALS_KEYS, "section 'trials'")
        launcher = self.choice(sec, key, "launcher", "process", ("process", "torchrun"))
        nproc = self.integer(sec, key, "nproc_per_node", 1, min_value=1)
        assert nproc is not None
        if nproc > 1 and launcher != "torchrun":
            raise self.err(
                (*key, "nproc_per_node"),
                f"nproc_per_node={nproc} runs several processes per trial, which needs "
                "launcher: torchrun (launcher is 'process')",
            )
        parallel = self.integer(sec, key, "parallel", 1, min_value=1)
        devices = self.devices(sec, key)
        if isinstance(devices, tuple) and nproc > len(devices):
            raise self.err(
                (*key, "nproc_per_node"),
                f"nproc_per_node={nproc} needs at least {nproc} GPUs per trial, but devices "
                f"lists {len(devices)}: {list(devices)}",
            )
        timeout_s = self.number(sec, key, "timeout_s", None, gt=0, null=True)
        stop_grace_s = self.number(sec, key, "stop_grace_s", 10.0, ge=0)
        max_retries = self.integer(sec, key, "max_retries", 1, min_value=0)
        memory_limit = self.memory_limit(sec, key)
        report_timeout_s = self.number(sec, key, "report_timeout_s", 60.0, gt=0)
        runs_dir_text = self.string(sec, key, "runs_dir", None, null=True, what="a folder path")
        if runs_dir_text is None:
            runs_dir = (self.dir / "runs" / study_name).resolve()
        else:
            runs_dir = (self.dir / Path(runs_dir_text).expanduser()).resolve()
        return TrialsSpec(
            launcher=launcher,  # type: ignore[arg-type]
            nproc_per_node=nproc,
            parallel=parallel,  # type: ignore[arg-type]
            devices=devices,
            timeout_s=timeout_s,
            stop_grace_s=stop_grace_s,  # type: ignore[arg-type]
            max_retries=max_retries,  # type: ignore[arg-type]
            memory_limit=memory_limit,
            report_timeout_s=report_timeout_s,  # type: ignore[arg-type]
            runs_dir=runs_dir,
        )

    def devices(self, sec: Mapping[str, Any], key: Key) -> Any:
        """Canonical devices: ``"auto"``, ``"cpu"``, ``"cuda"``, an int (a GPU count), or a tuple
        of GPU ids; :func:`dvt_hpo.launch.split_devices` shares them among the slots."""
        fkey = (*key, "devices")
        if "devices" not in sec:
            return "auto"
        value = sec["devices"]
        forms = (
            "auto, cpu, cuda (every visible GPU), a GPU count (integer >= 1), a list of GPU "
            "ids such as [0, 1], or a string such as '0,1', 'cuda:0,1' or 'cuda:2'"
        )
        if isinstance(value, bool) or value is None:
            raise self.err(fkey, f"must be {forms}, got {_describe(value)}")
        if isinstance(value, int):
            if value < 1:
                raise self.err(
                    fkey,
                    f"a GPU count must be >= 1, got {value}; to pick GPU {value} write "
                    f"[{value}] or 'cuda:{value}', for no GPU write cpu",
                )
            return value
        if isinstance(value, list):
            ids = value
        elif isinstance(value, str):
            text = value.strip().lower()
            if text in ("auto", "cpu"):
                return text
            if text in ("cuda", "gpu"):
                return "cuda"  # every visible GPU, and an error at launch when there is none
            if text.startswith("cuda:"):
                text = text[len("cuda:") :]
            if not _GPU_LIST_RE.match(text):
                raise self.err(
                    fkey, f"must be {forms}, got {value!r}{_hint(text, ['auto', 'cpu'])}"
                )
            ids = [int(part) for part in text.split(",")]
        else:
            raise self.err(fkey, f"must be {forms}, got {_describe(value)}")
        if not ids:
            raise self.err(fkey, "a list of GPU ids must not be empty; for no GPU write cpu")
        for i, gpu in enumerate(ids):
            if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0:
                sub = (*fkey, i) if isinstance(value, list) else fkey
                raise self.err(sub, f"GPU ids must be integers >= 0, got {_describe(gpu)}")
        if len(set(ids)) != len(ids):
            raise self.err(fkey, f"GPU ids must be distinct, got {ids}")
        return tuple(ids)

    def memory_limit(self, sec: Mapping[str, Any], key: Key) -> int | None:
        value = sec.get("memory_limit")
        if value is None:
            return None
        fkey = (*key, "memory_limit")
        try:
            size = parse_bytes(value)
        except ValueError as exc:
            raise self.err(fkey, f"must be null or a size: {exc}") from None
        if size < _MIN_MEMORY_LIMIT:
            raise self.err(
                fkey,
                f"must be at least {format_bytes(_MIN_MEMORY_LIMIT)} (a bare number is bytes; "
                f"write units such as '4GiB'), got {value!r}",
            )
        return size

    # -- trainer --------------------------------------------------------------------------------

    def trainer(
        self, root: dict[str, Any], deferred: Sequence[_Override]
    ) -> tuple[TrainerSpec, type | None]:
        key: Key = ("trainer",)
        if "trainer" not in root or root["trainer"] is None:
            raise self.err(
                key,
                "missing required section 'trainer': give trainer.config (a mapping, {} for the "
                "defaults) or trainer.config_file (a YAML file next to the study file)",
            )
        sec = self.section(root["trainer"], key, TRAINER_KEYS, "section 'trainer'")
        entrypoint = self.string(sec, key, "entrypoint", BUILTIN_ENTRYPOINT, what="an entry point")
        assert entrypoint is not None
        if not _ENTRYPOINT_RE.match(entrypoint):
            raise self.err(
                (*key, "entrypoint"),
                f"must be 'package.module:function' (e.g. 'dvt_hpo.train:run'), got {entrypoint!r}",
            )
        schema_text = self.string(sec, key, "schema", None, null=True, what="'module:Dataclass'")
        has_config = "config" in sec
        has_file = sec.get("config_file") is not None
        if has_config and has_file:
            raise self.err(
                (*key, "config_file"),
                "give trainer.config or trainer.config_file, not both",
            )
        if not has_config and not has_file:
            raise self.err(
                key,
                "needs config (a mapping, {} for the defaults) or config_file (a YAML file "
                "relative to the study file)",
            )
        config_file: Path | None = None
        if has_file:
            text = self.string(sec, key, "config_file", None, what="a file path")
            assert text is not None
            config_file = (self.dir / Path(text).expanduser()).resolve()
            if not config_file.is_file():
                raise self.err(
                    (*key, "config_file"),
                    f"no such file: {text!r} (resolved against the study file's folder: "
                    f"{config_file})",
                )
            shown = str(self.shown_dir / text) if not Path(text).is_absolute() else text
            data = _read_yaml(
                config_file, shown, self.doc, (*key, "config"), "the trainer config file"
            )
            sec["config"] = {} if data is None else data
        for override in deferred:
            _apply_override(self.doc, root, override)
        config = sec["config"]
        ckey = (*key, "config")
        if not isinstance(config, dict):
            raise self.err(
                ckey, f"must be a mapping (the trainer's config), got {_describe(config)}"
            )
        schema: type | None
        if schema_text is not None:
            schema = self.import_schema(schema_text, (*key, "schema"))
        elif entrypoint == BUILTIN_ENTRYPOINT:
            from dvt_hpo.train.config import TrainerConfig

            schema = TrainerConfig
        else:
            schema = None
        config = self.normalize_config(config, schema, ckey)
        spec = TrainerSpec(
            entrypoint=entrypoint, config=config, config_file=config_file, schema=schema_text
        )
        return spec, schema

    def import_schema(self, text: str, key: Key) -> type:
        module_name, sep, attr = text.partition(":")
        if not sep or not _ENTRYPOINT_RE.match(text):
            raise self.err(key, f"must be 'package.module:Dataclass', got {text!r}")
        try:
            with _import_context(self.dir):
                module = importlib.import_module(module_name)
        except Exception as exc:  # noqa: BLE001 - any import failure is the user's to see
            raise self.err(
                key, f"cannot import {module_name!r}: {type(exc).__name__}: {exc}"
            ) from None
        obj: Any = module
        for part in attr.split("."):
            if not hasattr(obj, part):
                names = [n for n in dir(obj) if not n.startswith("_")]
                raise self.err(key, f"{module_name!r} has no {part!r}{_hint(part, names)}")
            obj = getattr(obj, part)
        if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
            raise self.err(key, f"{text!r} must name a dataclass type, got {_describe(obj)}")
        return obj

    def config_error(self, exc: SpecError, prefix: Key) -> SpecError:
        """``exc`` from the trainer config's own checks, placed at its line in our files."""
        parts: list[Any] = []
        if exc.field:
            try:
                parts = space.parse_path(exc.field)
            except KeyError:
                parts = []
        return self.err((*prefix, *parts), exc.message)

    def normalize_config(self, config: dict[str, Any], schema: type | None, key: Key) -> dict:
        from dvt_hpo.train.schema import from_mapping, to_plain

        if schema is None:
            self.check_plain(config, key)
            return copy.deepcopy(config)
        try:
            built = from_mapping(schema, config)
        except SpecError as exc:
            raise self.config_error(exc, key) from None
        except TypeError as exc:
            raise self.err(
                ("trainer", "schema"), f"the schema {schema.__name__} is not supported: {exc}"
            ) from None
        to_dict = getattr(built, "to_dict", None)
        return to_dict() if callable(to_dict) else to_plain(built)

    def check_plain(self, value: Any, key: Key) -> None:
        """The config travels as JSON: only plain data."""
        if isinstance(value, dict):
            for k, v in value.items():
                if not isinstance(k, str):
                    raise self.err((*key, k), f"keys must be strings, got {_describe(k)}")
                self.check_plain(v, (*key, k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self.check_plain(v, (*key, i))
        elif not isinstance(value, (str, int, float, bool, type(None))):
            raise self.err(
                key,
                f"must be plain data (string, number, boolean, null, list, mapping), got "
                f"{_describe(value)}",
            )

    def field_type(self, schema: type, path: str, key: Key, what: str) -> Any:
        from dvt_hpo.train.schema import field_type_at

        try:
            return field_type_at(schema, path)
        except KeyError as exc:
            reason = exc.args[0] if exc.args else str(exc)
            raise self.err(
                key, f"{what} {path!r} is not in the trainer config ({schema.__name__}): {reason}"
            ) from None

    def config_value(self, config: Mapping[str, Any], path: str, key: Key, what: str) -> Any:
        """The value at ``path`` of a schema-less config (``None`` for a new last key).

        Without a schema every section on the way must exist, but the last key may be new:
        the trainer reads what it is given, and set_path adds the key.
        """

        def fail(exc: Exception) -> SpecError:
            return self.err(
                key,
                f"{what} {path!r} does not fit trainer.config (the entry point has no schema, so "
                f"paths are checked against the config itself): {exc}",
            )

        try:
            return space.get_path(config, path)
        except (KeyError, IndexError) as exc:
            parts = space.parse_path(path)
            parent: Any = config
            if len(parts) > 1:
                try:
                    parent = space.get_path(config, space.format_path(parts[:-1]))
                except (KeyError, IndexError) as parent_exc:
                    raise fail(parent_exc) from None
            if isinstance(parent, dict) and isinstance(parts[-1], str):
                return None
            raise fail(exc) from None

    # -- search space ---------------------------------------------------------------------------

    def search_space(
        self, root: Mapping[str, Any], schema: type | None, config: dict[str, Any]
    ) -> tuple[Dimension, ...]:
        key: Key = ("search_space",)
        example = "- {name: lr, kind: float, path: optim.optim_args.lr, low: 1.0e-4, high: 0.1}"
        if "search_space" not in root:
            raise self.err(
                key,
                f"missing required section 'search_space': a list of dimensions such as {example}",
            )
        items = root["search_space"]
        if not isinstance(items, list):
            raise self.err(
                key, f"must be a list of dimensions such as {example}, got {_describe(items)}"
            )
        if not items:
            raise self.err(key, "must list at least one dimension, got an empty list")
        all_names = [
            (item.get("name") or item.get("path")) if isinstance(item, dict) else None
            for item in items
        ]
        dims: list[Dimension] = []
        for i, item in enumerate(items):
            dim = self.dimension(item, (*key, i), dims, all_names)
            for j, other in enumerate(dims):
                a, b = _path_parts(other.path), _path_parts(dim.path)
                n = min(len(a), len(b))
                if a[:n] == b[:n] and not _conditions_exclusive(dim.when, other.when):
                    relation = "is the same as" if len(a) == len(b) else "overlaps"
                    raise self.err(
                        (*key, i, "path"),
                        f"{dim.path!r} {relation} search_space[{j}].path {other.path!r} "
                        f"(dimension {other.name!r}): one write would undo the other; two "
                        "dimensions may share a path only when their `when` conditions exclude "
                        "each other",
                    )
            self.check_target(dim, (*key, i), schema, config)
            dims.append(dim)
        return tuple(dims)

    def dimension(
        self, item: Any, key: Key, earlier: Sequence[Dimension], all_names: Sequence[Any]
    ) -> Dimension:
        if not isinstance(item, dict):
            raise self.err(
                key,
                f"a dimension must be a mapping {{name, kind, path, ...}}, got {_describe(item)}",
            )
        for name in item:
            if not isinstance(name, str) or name not in DIMENSION_KEYS:
                raise self.err(
                    (*key, name),
                    f"unknown key {name!r} in a dimension{_hint(str(name), DIMENSION_KEYS)} "
                    f"(allowed keys: {', '.join(DIMENSION_KEYS)})",
                )
        if "path" not in item:
            raise self.err(
                key, "a dimension needs 'path': where its value goes in the trainer config"
            )
        path = self.dotted(item["path"], (*key, "path"))
        name = self.string(item, key, "name", path, what="a non-empty string")
        assert name is not None
        for j, other in enumerate(earlier):
            if other.name == name:
                raise self.err(
                    (*key, "name" if "name" in item else "path"),
                    f"duplicate dimension name {name!r} (also search_space[{j}]); names must be "
                    "unique",
                )
        if "kind" not in item:
            raise self.err(
                key, f"dimension {name!r} needs 'kind': one of {', '.join(DIMENSION_KINDS)}"
            )
        kind = self.choice(item, key, "kind", "", DIMENSION_KINDS)
        allowed = _KIND_KEYS[kind]
        for k in item:
            if k in _KIND_KEYS["float"] + _KIND_KEYS["categorical"] and k not in allowed:
                takes = f"takes {', '.join(allowed)}" if allowed else "takes no range or choices"
                raise self.err((*key, k), f"{k!r} does not apply to kind {kind!r} ({kind} {takes})")
        when = self.when(item, key, name, earlier, all_names)
        if kind == "float":
            dim = self.float_dimension(item, key, name, path, when)
        elif kind == "int":
            dim = self.int_dimension(item, key, name, path, when)
        elif kind == "categorical":
            dim = self.categorical_dimension(item, key, name, path, when)
        else:
            dim = Dimension(name=name, kind="bool", path=path, when=when)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                space.distribution(dim)
        except ValueError as exc:  # Optuna's own rule, should ours have missed one
            raise self.err(key, f"Optuna rejects dimension {name!r}: {exc}") from None
        return dim

    def bounds(self, item: Mapping[str, Any], key: Key, kind: str) -> tuple[Any, Any]:
        out = []
        for bound in ("low", "high"):
            if bound not in item:
                raise self.err(key, f"kind {kind!r} needs 'low' and 'high'; {bound!r} is missing")
            value = item[bound]
            if kind == "int":
                if isinstance(value, float) and value.is_integer():
                    raise self.err(
                        (*key, bound),
                        f"int bounds must be integers, got {value!r} (float); write {int(value)}",
                    )
                if isinstance(value, bool) or not isinstance(value, int):
                    raise self.err(
                        (*key, bound), f"int bounds must be integers, got {_describe(value)}"
                    )
            elif (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
            ):
                raise self.err(
                    (*key, bound), f"float bounds must be finite numbers, got {_describe(value)}"
                )
            out.append(value)
        low, high = out
        if low > high:
            raise self.err((*key, "low"), f"low must be <= high, got low={low!r}, high={high!r}")
        return low, high

    def float_dimension(
        self, item: Mapping[str, Any], key: Key, name: str, path: str, when: Condition | None
    ) -> Dimension:
        low, high = self.bounds(item, key, "float")
        log = self.boolean(item, key, "log", False)
        step = self.number(item, key, "step", None, gt=0, null=True)
        if step is not None and log:
            raise self.err(
                (*key, "step"),
                f"step and log cannot be used together (Optuna's rule), got step={step!r} and "
                "log=true; drop step for log-uniform sampling or log for a regular grid",
            )
        if log and low <= 0:
            raise self.err((*key, "low"), f"log sampling needs low > 0, got low={low!r}")
        return Dimension(
            name=name,
            kind="float",
            path=path,
            low=float(low),
            high=float(high),
            step=step,
            log=log,
            when=when,
        )

    def int_dimension(
        self, item: Mapping[str, Any], key: Key, name: str, path: str, when: Condition | None
    ) -> Dimension:
        low, high = self.bounds(item, key, "int")
        log = self.boolean(item, key, "log", False)
        step = self.integer(item, key, "step", 1, min_value=1)
        assert step is not None
        if log and step != 1:
            raise self.err(
                (*key, "step"),
                f"step and log cannot be used together (Optuna's rule: log needs step 1), got "
                f"step={step} and log=true",
            )
        if log and low < 1:
            raise self.err((*key, "low"), f"log sampling needs low >= 1, got low={low}")
        return Dimension(
            name=name, kind="int", path=path, low=low, high=high, step=step, log=log, when=when
        )

    def categorical_dimension(
        self, item: Mapping[str, Any], key: Key, name: str, path: str, when: Condition | None
    ) -> Dimension:
        ckey = (*key, "choices")
        if "choices" not in item:
            raise self.err(key, f"kind 'categorical' needs 'choices' (dimension {name!r})")
        choices = item["choices"]
        if not isinstance(choices, list) or not choices:
            raise self.err(ckey, f"must be a non-empty list, got {_describe(choices)}")
        for j, choice in enumerate(choices):
            if not isinstance(choice, _CHOICE_TYPES):
                raise self.err(
                    (*ckey, j),
                    "each choice must be null, a boolean, an integer, a float or a string "
                    f"(Optuna's rule), got {_describe(choice)}",
                )
            for i, before in enumerate(choices[:j]):
                if space.same_value(before, choice):
                    raise self.err((*ckey, j), f"duplicate choice {choice!r} (also choices[{i}])")
        return Dimension(
            name=name, kind="categorical", path=path, choices=tuple(choices), when=when
        )

    def when(
        self,
        item: Mapping[str, Any],
        key: Key,
        name: str,
        earlier: Sequence[Dimension],
        all_names: Sequence[Any],
    ) -> Condition | None:
        if item.get("when") is None:
            return None
        wkey = (*key, "when")
        value = item["when"]
        if not isinstance(value, dict) or not value:
            raise self.err(
                wkey,
                "must be a mapping {earlier_dimension: value or [values]}, got "
                f"{_describe(value)}",
            )
        by_name = {d.name: d for d in earlier}
        equals: dict[str, tuple[Any, ...]] = {}
        for ref, allowed in value.items():
            rkey = (*wkey, ref)
            if ref == name:
                raise self.err(rkey, f"dimension {name!r} cannot depend on itself")
            if ref not in by_name:
                if ref in all_names:
                    raise self.err(
                        rkey,
                        f"refers to {ref!r}, which is defined later; a condition can only refer "
                        "to dimensions listed before it (move it up)",
                    )
                names = list(by_name)
                listing = ", ".join(names) if names else "none"
                raise self.err(
                    rkey,
                    f"refers to unknown dimension {ref!r}{_hint(str(ref), names)} (earlier "
                    f"dimensions: {listing})",
                )
            target = by_name[ref]
            values = allowed if isinstance(allowed, list) else [allowed]
            if not values:
                raise self.err(rkey, "needs at least one value, got an empty list")
            if target.kind == "float" and target.step is None:
                raise self.err(
                    rkey,
                    f"{ref!r} is a continuous float dimension, so a condition on one of its "
                    "values would almost never hold; give it a step or make it categorical",
                )
            for j, v in enumerate(values):
                if not _can_take(target, v):
                    vkey = (*rkey, j) if isinstance(allowed, list) else rkey
                    raise self.err(
                        vkey, f"{ref!r} never takes {_describe(v)}: it takes {_takes(target)}"
                    )
            equals[ref] = tuple(values)
        return Condition(equals=equals)

    def check_target(
        self, dim: Dimension, key: Key, schema: type | None, config: dict[str, Any]
    ) -> None:
        """The dimension's path exists and every value it can produce is accepted there."""
        pkey = (*key, "path")
        if schema is None:
            current = self.config_value(config, dim.path, pkey, "path")
            if isinstance(current, (dict, list)):
                raise self.err(
                    pkey,
                    f"{dim.path!r} is a section ({type(current).__name__}) of trainer.config, not "
                    "a value a dimension can set",
                )
            return
        from dvt_hpo.train.schema import from_mapping, type_name, value_fits_type

        tp = self.field_type(schema, dim.path, pkey, "path")
        produced = _produced_values(dim, key)
        for vkey, value in produced:
            if not value_fits_type(value, tp):
                hint = ""
                if dim.kind == "float" and value_fits_type(1, tp):
                    hint = "; use kind: int"
                raise self.err(
                    vkey,
                    f"dimension {dim.name!r} ({dim.kind}) produces {value!r}, but "
                    f"{dim.path} takes {type_name(tp)}{hint}",
                )
        # The config's own rules (epochs >= 1, 0 < val_fraction < 1, ...) at the extremes.
        for vkey, value in produced:
            data = copy.deepcopy(config)
            space.set_path(data, dim.path, value, create=True)
            try:
                from_mapping(schema, data)
            except SpecError as exc:
                raise self.err(
                    vkey,
                    f"dimension {dim.name!r} can produce {value!r}, which the trainer config "
                    f"rejects: {exc.field + ': ' if exc.field else ''}{exc.message}",
                ) from None

    # -- batch size -----------------------------------------------------------------------------

    def batch_size(
        self,
        root: Mapping[str, Any],
        schema: type | None,
        config: dict[str, Any],
        dims: Sequence[Dimension],
    ) -> BatchSizeSpec:
        key: Key = ("batch_size",)
        sec = self.section(root.get("batch_size"), key, BATCH_SIZE_KEYS, "section 'batch_size'")
        defaults = BatchSizeSpec()
        auto = self.boolean(sec, key, "auto", defaults.auto)
        path = self.dotted(sec.get("path", defaults.path), (*key, "path"))
        low = self.integer(sec, key, "min", defaults.min, min_value=1)
        assert low is not None
        high = self.integer(sec, key, "max", max(defaults.max, low), min_value=low)
        assert high is not None
        start = self.integer(sec, key, "start", None, min_value=low, null=True)
        if start is not None and start > high:
            raise self.err(
                (*key, "start"), f"must be in [min, max] = [{low}, {high}] or null, got {start}"
            )
        multiple_of = self.integer(sec, key, "multiple_of", defaults.multiple_of, min_value=1)
        assert multiple_of is not None
        if -(-low // multiple_of) * multiple_of > high:
            raise self.err(
                (*key, "multiple_of"),
                f"no multiple of {multiple_of} lies in [min, max] = [{low}, {high}]",
            )
        tolerance = self.number(sec, key, "tolerance", defaults.tolerance, gt=0, le=0.5)
        effective = self.integer(sec, key, "effective", None, min_value=1, null=True)
        if effective is not None and not auto:
            raise self.err(
                (*key, "effective"),
                "an effective batch size is reached by accumulating the batch size the search "
                "finds, which needs batch_size.auto: true",
            )
        accumulate_path = self.dotted(
            sec.get("accumulate_path", defaults.accumulate_path), (*key, "accumulate_path")
        )
        memory_keys = self.memory_keys(sec, key)
        search_paths = {d.path: i for i, d in enumerate(dims)}
        checks: list[tuple[str, Key, str, int | None]] = []
        if auto:
            checks.append((path, (*key, "path"), "batch_size.path", low))
            if path in search_paths:
                raise self.err(
                    (*key, "path"),
                    f"{path!r} is also search_space[{search_paths[path]}].path; with "
                    "batch_size.auto: true the batch size is found per trial, not searched "
                    "(set auto: false to search it)",
                )
        if effective is not None:
            checks.append((accumulate_path, (*key, "accumulate_path"), "accumulate_path", 1))
            if accumulate_path in search_paths:
                raise self.err(
                    (*key, "accumulate_path"),
                    f"{accumulate_path!r} is also search_space[{search_paths[accumulate_path]}]"
                    ".path; with batch_size.effective set it is computed per trial",
                )
        for i, mkey in enumerate(memory_keys):
            checks.append((mkey, (*key, "memory_keys", i), "memory key", None))
        for target, tkey, what, sample_value in checks:
            if schema is None:
                self.config_value(config, target, tkey, what)
                continue
            tp = self.field_type(schema, target, tkey, what)
            if sample_value is not None:
                from dvt_hpo.train.schema import type_name, value_fits_type

                # The field must hold an integer: a float field would turn 64 into 64.0.
                if not value_fits_type(sample_value, tp) or (
                    tp is not Any and value_fits_type(0.5, tp)
                ):
                    raise self.err(
                        tkey,
                        f"{what} {target!r} must be an integer field, it takes {type_name(tp)}",
                    )
        if auto and schema is not None and schema.__module__ == "dvt_hpo.train.config":
            # The built-in trainer applies the found size itself, at these two fields.
            for name, value, fixed in (
                ("path", path, defaults.path),
                ("accumulate_path", accumulate_path, defaults.accumulate_path),
            ):
                if value != fixed:
                    raise self.err(
                        (*key, name),
                        f"the built-in trainer uses {fixed!r} for batch_size.{name}, got "
                        f"{value!r} (other paths are for custom entry points)",
                    )
        return BatchSizeSpec(
            auto=auto,
            path=path,
            min=low,
            max=high,
            start=start,
            multiple_of=multiple_of,
            tolerance=tolerance,  # type: ignore[arg-type]
            effective=effective,
            accumulate_path=accumulate_path,
            memory_keys=memory_keys,
        )

    def memory_keys(self, sec: Mapping[str, Any], key: Key) -> tuple[str, ...]:
        mkey = (*key, "memory_keys")
        value = sec.get("memory_keys")
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.err(
                mkey,
                f"must be a list of dotted config paths such as [model.builder], got "
                f"{_describe(value)}",
            )
        out: list[str] = []
        for i, item in enumerate(value):
            path = self.dotted(item, (*mkey, i))
            if path in out:
                raise self.err((*mkey, i), f"duplicate memory key {path!r}")
            out.append(path)
        return tuple(out)

    # -- tracking -------------------------------------------------------------------------------

    def tracking(self, root: Mapping[str, Any]) -> TrackingSpec:
        key: Key = ("tracking",)
        sec = self.section(root.get("tracking"), key, TRACKING_KEYS, "section 'tracking'")
        if sec.get("mlflow") is None:
            return TrackingSpec()
        mkey = (*key, "mlflow")
        mlflow = self.section(sec["mlflow"], mkey, MLFLOW_KEYS, "tracking.mlflow")
        uri = self.string(mlflow, mkey, "tracking_uri", None, null=True, what="a URI or folder")
        if uri is not None:
            if uri.startswith("sqlite:///"):
                uri = resolve_url(uri, self.dir)
            elif "://" not in uri and not uri.startswith("file:"):
                # A plain folder is MLflow's file store; anchor it like every other path.
                uri = str((self.dir / Path(uri).expanduser()).resolve())
        experiment = self.string(mlflow, mkey, "experiment", None, null=True)
        return TrackingSpec(mlflow=MlflowSpec(tracking_uri=uri, experiment=experiment))

    # -- cross-section checks -------------------------------------------------------------------

    def check_algorithms(self, study: StudySection, dims: Sequence[Dimension]) -> None:
        """Build the sampler and pruner once, so Optuna's own argument checks run now."""
        sampler_key: Key = ("study", "sampler")
        if study.sampler.kind == "grid":
            total = 1
            for i, dim in enumerate(dims):
                size = space.grid_size(dim)
                if size is None:
                    raise self.err(
                        ("search_space", i),
                        f"sampler kind 'grid' needs every dimension enumerable, but float "
                        f"dimension {dim.name!r} has no step; give it a step or make it "
                        "categorical",
                    )
                total *= size
            if total > _MAX_GRID_POINTS:
                raise self.err(
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
                raise self.err(key, f"Optuna rejects the arguments: {exc}") from None


def _path_parts(path: str) -> list[str | int]:
    """Parsed path with ``a.0`` and ``a[0]`` made equal, for comparing paths."""
    return [int(p) if isinstance(p, str) and p.isdigit() else p for p in space.parse_path(path)]


def _produced_values(dim: Dimension, key: Key) -> list[tuple[Key, Any]]:
    """The extreme values a dimension can write (and where they are declared)."""
    if dim.kind == "float":
        return [((*key, "low"), float(dim.low)), ((*key, "high"), float(dim.high))]  # type: ignore[arg-type]
    if dim.kind == "int":
        return [((*key, "low"), dim.low), ((*key, "high"), dim.high)]
    if dim.kind == "categorical":
        return [((*key, "choices", j), c) for j, c in enumerate(dim.choices or ())]
    return [((*key, "kind"), False), ((*key, "kind"), True)]


def _can_take(dim: Dimension, value: Any) -> bool:
    if dim.kind == "bool":
        return isinstance(value, bool)
    if dim.kind == "categorical":
        return any(space.same_value(value, c) for c in dim.choices or ())
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    low, high = dim.low, dim.high
    assert low is not None and high is not None
    if not low <= value <= high:
        return False
    if dim.kind == "int":
        return isinstance(value, int) and (value - low) % int(dim.step or 1) == 0
    step = float(dim.step)  # type: ignore[arg-type]
    return abs(round((value - low) / step) * step + low - value) < 1e-8


def _takes(dim: Dimension) -> str:
    if dim.kind == "bool":
        return "true or false"
    if dim.kind == "categorical":
        return f"one of {list(dim.choices or ())}"
    if dim.kind == "int":
        return f"integers from {dim.low} to {dim.high} in steps of {dim.step or 1}"
    return f"numbers from {dim.low} to {dim.high} in steps of {dim.step}"


# ---------------------------------------------------------------------------------------------
# Public API


def load_spec(
    path: str | Path, overrides: Sequence[str] = (), *, check_runnable: bool = False
) -> StudySpec:
    """Read and validate a study file; ``overrides`` are ``--set PATH=VALUE`` strings.

    Overrides are parsed as YAML and applied to the file's tree before validation
    (``study.n_trials=20``, ``trainer.config.epochs=3``, ``search_space[0].high=0.5`` or
    ``search_space.0.high=0.5``). Raises :class:`SpecError` for the first problem found.
    Nothing is written anywhere. ``check_runnable`` also checks what running needs beyond a
    valid file: the entry point's module and the storage driver can be found on this machine.
    """
    shown = str(path)
    absolute = Path(path).expanduser().resolve()
    parsed = [_parse_override(text) for text in overrides]
    doc = _Doc(shown)
    root = _read_yaml(absolute, shown, doc, (), "the study file")
    if root is None:
        raise SpecError(
            "the study file is empty; it needs at least study, trainer and search_space", file=shown
        )
    if not isinstance(root, dict):
        raise SpecError(
            f"a study file must be a mapping of sections ({', '.join(SECTIONS)}), got "
            f"{_describe(root)}",
            file=shown,
            line=doc.loc(())[1],
        )
    # Overrides into the trainer config wait until a config_file is read in.
    deferred = [o for o in parsed if o.parts[:2] == ("trainer", "config") and len(o.parts) > 2]
    for override in parsed:
        if override not in deferred:
            _apply_override(doc, root, override)
    builder = _Builder(doc, absolute, shown)
    for name in root:
        if not isinstance(name, str) or name not in SECTIONS:
            raise doc.error(
                (name,),
                f"unknown section {name!r}{_hint(str(name), SECTIONS)} (sections: "
                f"{', '.join(SECTIONS)})",
            )
    study = builder.study(root)
    objective = builder.objective(root)
    trials = builder.trials(root, study.name)
    trainer, schema = builder.trainer(root, deferred)
    dims = builder.search_space(root, schema, trainer.config)
    batch_size = builder.batch_size(root, schema, trainer.config, dims)
    tracking = builder.tracking(root)
    builder.check_algorithms(study, dims)
    if check_runnable:
        _check_runnable(doc, absolute.parent, trainer.entrypoint, study.storage, trials)
    return StudySpec(
        path=absolute,
        study=study,
        objective=objective,
        trials=trials,
        batch_size=batch_size,
        trainer=trainer,
        search_space=dims,
        tracking=tracking,
    )


def _check_runnable(
    doc: _Doc, folder: Path, entrypoint: str, storage: str, trials: TrialsSpec
) -> None:
    """The entry point's module and the storage driver can be found, without importing them (a
    user's module may import torch)."""
    import importlib.util

    from dvt_hpo.storage import check_storage_driver

    module = entrypoint.partition(":")[0]
    found = False
    for extra in ([], [str(folder)]):
        sys.path[:0] = extra
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        finally:
            del sys.path[: len(extra)]
        if found:
            break
    if not found:
        raise doc.error(
            ("trainer", "entrypoint"),
            f"module {module!r} of the entry point {entrypoint!r} cannot be found (looked in "
            f"the installed packages and in {folder})",
        )
    try:
        check_storage_driver(storage)
    except SpecError as exc:
        raise doc.error(("study", "storage"), exc.message) from None
    # The GPUs a study names must exist on this machine before anything is written.
    from dvt_hpo.launch import split_devices

    try:
        split_devices(trials.devices, trials.parallel, nproc_per_node=trials.nproc_per_node)
    except SpecError as exc:
        raise doc.error(("trials", "devices"), exc.message) from None


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
    data["study"]["storage"] = redact_url(spec.study.storage)
    return data
