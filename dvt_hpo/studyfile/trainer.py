"""Section ``trainer``: the entry point (or a command, :mod:`dvt_hpo.studyfile.command`), the trainer
config (inline or a file) and its schema.

The config is normalized through its schema (the built-in :class:`~dvt_hpo.train.TrainerConfig`,
or ``trainer.schema: module:Dataclass``) so the spec holds it with every default filled; without
a schema it must be plain data. ``trainer.schema`` is imported by the one entry-point rule of
:mod:`dvt_hpo.process.import_path` (the study folder first, never the working directory).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dvt_hpo.config.hints import describe, did_you_mean
from dvt_hpo.config.paths import format_path, get_path, parse_path
from dvt_hpo.config.schema import field_type_at, from_mapping, to_plain
from dvt_hpo.config.source import Key, Override, apply_override, read_yaml
from dvt_hpo.exceptions import SpecError
from dvt_hpo.process.import_path import study_imports
from dvt_hpo.spec.model import BUILTIN_ENTRYPOINT, COMMAND_ENTRYPOINT, TrainerSpec
from dvt_hpo.studyfile.command import read_command
from dvt_hpo.studyfile.fields import Reader

__all__ = ["ENTRYPOINT_RE", "config_value", "field_type", "read_trainer"]

ENTRYPOINT_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def read_trainer(
    r: Reader, root: dict[str, Any], deferred: Sequence[Override]
) -> tuple[TrainerSpec, type | None]:
    key: Key = ("trainer",)
    if "trainer" not in root or root["trainer"] is None:
        raise r.err(
            key,
            "missing required section 'trainer': give trainer.config (a mapping, {} for the "
            "defaults) or trainer.config_file (a YAML file next to the study file)",
        )
    sec = r.section(TrainerSpec, root["trainer"], key, "section 'trainer'")
    raw = root["trainer"]  # config_file's YAML is read into it, for the overrides that follow
    command, metrics_pattern = read_command(r, sec, key)
    default = COMMAND_ENTRYPOINT if command is not None else BUILTIN_ENTRYPOINT
    entrypoint = sec.get("entrypoint", default)
    module_text, _, function = entrypoint.partition(":")
    if module_text.endswith(".py"):
        # A file path: trials import modules, found from the study file's folder first.
        module = ".".join(Path(module_text[:-3]).parts)
        raise r.err(
            (*key, "entrypoint"),
            f"names a file, {module_text!r}; name its module instead: write "
            f"'{module}:{function or 'run'}' (trials import it from the study file's folder "
            "first, then PYTHONPATH)",
        )
    if not ENTRYPOINT_RE.match(entrypoint):
        raise r.err(
            (*key, "entrypoint"),
            f"must be 'package.module:function' (e.g. 'dvt_hpo.train:run'), got {entrypoint!r}",
        )
    schema_text = sec.get("schema")
    has_config = "config" in sec
    has_file = sec.get("config_file") is not None
    if has_config and has_file:
        raise r.err(
            (*key, "config_file"),
            "give trainer.config or trainer.config_file, not both",
        )
    if not has_config and not has_file and command is not None:
        # A script may take everything from its command line: no config is needed.
        raw["config"] = {}
    elif not has_config and not has_file:
        raise r.err(
            key,
            "needs config (a mapping, {} for the defaults) or config_file (a YAML file "
            "relative to the study file)",
        )
    config_file: Path | None = None
    if has_file:
        text = r.value(sec["config_file"], (*key, "config_file"), str, what="a file path")
        config_file = (r.dir / Path(text).expanduser()).resolve()
        if not config_file.is_file():
            raise r.err(
                (*key, "config_file"),
                f"no such file: {text!r} (resolved against the study file's folder: {config_file})",
            )
        shown = str(r.shown_dir / text) if not Path(text).is_absolute() else text
        data = read_yaml(config_file, shown, r.doc, (*key, "config"), "the trainer config file")
        raw["config"] = {} if data is None else data
    for override in deferred:
        apply_override(r.doc, root, override)
    config = raw["config"]
    ckey = (*key, "config")
    if not isinstance(config, dict):
        raise r.err(ckey, f"must be a mapping (the trainer's config), got {describe(config)}")
    schema: type | None
    if schema_text is not None:
        schema = import_schema(r, schema_text, (*key, "schema"))
    elif entrypoint == BUILTIN_ENTRYPOINT:
        from dvt_hpo.train.config import TrainerConfig  # stdlib + schema: no torch

        schema = TrainerConfig
    else:
        schema = None
    config = normalize_config(r, config, schema, ckey)
    spec = TrainerSpec(
        entrypoint=entrypoint,
        config=config,
        config_file=config_file,
        schema=schema_text,
        command=command,
        metrics_pattern=metrics_pattern,
    )
    return spec, schema


def import_schema(r: Reader, text: str, key: Key) -> type:
    module_name, sep, attr = text.partition(":")
    if not sep or not ENTRYPOINT_RE.match(text):
        raise r.err(key, f"must be 'package.module:Dataclass', got {text!r}")
    try:
        with study_imports(r.dir):
            module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to see
        raise r.err(key, f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            raise r.err(key, f"{module_name!r} has no {part!r}{did_you_mean(part, names)}")
        obj = getattr(obj, part)
    if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
        raise r.err(key, f"{text!r} must name a dataclass type, got {describe(obj)}")
    return obj


def normalize_config(r: Reader, config: dict[str, Any], schema: type | None, key: Key) -> dict:
    if schema is None:
        check_plain(r, config, key)
        return copy.deepcopy(config)
    try:
        built = from_mapping(schema, config)
    except SpecError as exc:
        raise r.doc.place(exc, key) from None
    except TypeError as exc:
        raise r.err(
            ("trainer", "schema"), f"the schema {schema.__name__} is not supported: {exc}"
        ) from None
    to_dict = getattr(built, "to_dict", None)
    return to_dict() if callable(to_dict) else to_plain(built)


def check_plain(r: Reader, value: Any, key: Key) -> None:
    """The config travels as JSON: only plain data."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise r.err((*key, k), f"keys must be strings, got {describe(k)}")
            check_plain(r, v, (*key, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_plain(r, v, (*key, i))
    elif not isinstance(value, (str, int, float, bool, type(None))):
        raise r.err(
            key,
            f"must be plain data (string, number, boolean, null, list, mapping), got "
            f"{describe(value)}",
        )


def field_type(r: Reader, schema: type, path: str, key: Key, what: str) -> Any:
    try:
        return field_type_at(schema, path)
    except KeyError as exc:
        reason = exc.args[0] if exc.args else str(exc)
        raise r.err(
            key, f"{what} {path!r} is not in the trainer config ({schema.__name__}): {reason}"
        ) from None


def config_value(r: Reader, config: Mapping[str, Any], path: str, key: Key, what: str) -> Any:
    """The value at ``path`` of a schema-less config (``None`` for a new last key).

    Without a schema every section on the way must exist, but the last key may be new:
    the trainer reads what it is given, and set_path adds the key.
    """

    def fail(exc: Exception) -> SpecError:
        return r.err(
            key,
            f"{what} {path!r} does not fit trainer.config (the entry point has no schema, so "
            f"paths are checked against the config itself): {exc}",
        )

    try:
        return get_path(config, path)
    except (KeyError, IndexError) as exc:
        parts = parse_path(path)
        parent: Any = config
        if len(parts) > 1:
            try:
                parent = get_path(config, format_path(parts[:-1]))
            except (KeyError, IndexError) as parent_exc:
                raise fail(parent_exc) from None
        if isinstance(parent, dict) and isinstance(parts[-1], str):
            return None
        raise fail(exc) from None
