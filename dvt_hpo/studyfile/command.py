"""``trainer.command`` and ``trainer.metrics_pattern``: a training script as the trainer.

Read with section ``trainer`` (:func:`read_command`: the argv's shape and placeholder syntax,
the pattern's regex and groups) and checked once the search space and batch size are known
(:func:`check_command`: every placeholder resolves, ``batch_size.auto`` is refused). Whether
the executable exists is a runnable check (:mod:`dvt_hpo.run.preflight`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from dvt_hpo.batch.spec import BatchSizeSpec
from dvt_hpo.command.template import RESERVED, TemplateError, placeholders
from dvt_hpo.config.hints import describe, did_you_mean
from dvt_hpo.config.paths import get_path, parse_path
from dvt_hpo.config.source import Key
from dvt_hpo.spec.model import COMMAND_ENTRYPOINT, Dimension, TrainerSpec
from dvt_hpo.studyfile.fields import Reader

__all__ = ["check_command", "check_placeholders", "read_command"]

STEP_GROUP = "step"


def read_command(
    r: Reader, sec: Mapping[str, Any], key: Key
) -> tuple[tuple[str, ...] | None, str | None]:
    """``(command, metrics_pattern)`` of section ``trainer`` (``None`` when absent)."""
    pattern_text = sec.get("metrics_pattern")
    if sec.get("command") is None:
        if sec.get("entrypoint") == COMMAND_ENTRYPOINT:
            raise r.err(
                (*key, "entrypoint"),
                f"{COMMAND_ENTRYPOINT} runs a trainer.command: give the command instead",
            )
        if pattern_text is not None:
            raise r.err(
                (*key, "metrics_pattern"),
                "applies to trainer.command (a script's stdout lines); an entry point reports "
                "with ctx.report",
            )
        return None, None
    ckey = (*key, "command")
    if "entrypoint" in sec:
        raise r.err(
            ckey,
            "give trainer.entrypoint (a Python function run(config, ctx)) or trainer.command "
            "(a script run as a process), not both",
        )
    argv = sec["command"]
    if not isinstance(argv, list) or not argv:
        raise r.err(
            ckey,
            'must be a non-empty list of strings, e.g. ["{python}", "train.py", "--lr", "{lr}"], '
            f"got {describe(argv)}",
        )
    for i, arg in enumerate(argv):
        if not isinstance(arg, str):
            raise r.err(
                (*ckey, i),
                f"must be a string (quote numbers: every argument is text), got {describe(arg)}",
            )
        try:
            placeholders(arg)
        except TemplateError as exc:
            raise r.err((*ckey, i), str(exc)) from None
    if not argv[0].strip():
        raise r.err((*ckey, 0), "the executable must not be empty")
    pattern = None
    if pattern_text is not None:
        pattern = r.value(pattern_text, (*key, "metrics_pattern"), str, what="a regex")
        check_pattern(r, pattern, (*key, "metrics_pattern"))
    return tuple(argv), pattern


def check_pattern(r: Reader, text: str, key: Key) -> re.Pattern[str]:
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise r.err(key, f"is not a valid regular expression: {exc}") from None
    groups = set(pattern.groupindex)
    example = r"'epoch (?P<step>\d+) .*val_f1=(?P<macro_f1>[0-9.]+)'"
    if STEP_GROUP not in groups:
        raise r.err(
            key,
            f"needs a named group 'step' (the epoch or step number) and one per metric, e.g. "
            f"{example}; it has {sorted(groups) or 'no named groups'}",
        )
    if len(groups) < 2:
        raise r.err(
            key,
            f"needs a named group per metric besides 'step', e.g. {example}",
        )
    return pattern


def check_command(
    r: Reader,
    trainer: TrainerSpec,
    dims: Sequence[Dimension],
    batch_size: BatchSizeSpec,
) -> None:
    """What a command trainer needs of the other sections: each placeholder resolves in every
    trial, and no batch-size search."""
    if trainer.command is None:
        return
    if batch_size.auto:
        raise r.err(
            ("batch_size", "auto"),
            "a trainer.command script cannot be probed for the batch size that fits (the "
            "search calls a fits(batch_size) function inside the trainer's process); set "
            "auto: false, or search the batch size as a dimension",
        )
    check_placeholders(r, trainer.command, dims, trainer.config)


def check_placeholders(
    r: Reader, command: Sequence[str], dims: Sequence[Dimension], config: Mapping[str, Any]
) -> None:
    """Each placeholder of ``command`` resolves in every trial (a dimension's name or path, a
    trainer.config field, a reserved name)."""
    by_name = {d.name: d for d in dims}
    dim_paths = {d.path for d in dims}
    for i, arg in enumerate(command):
        for name in placeholders(arg):
            problem = _unresolved(name, by_name, dim_paths, config)
            if problem is not None:
                raise r.err(("trainer", "command", i), f"placeholder {{{name}}}: {problem}")


def _unresolved(
    name: str,
    by_name: Mapping[str, Dimension],
    dim_paths: set[str],
    config: Mapping[str, Any],
) -> str | None:
    """Why ``{name}`` may have no value in some trial, or ``None`` when it always has one."""
    if name in RESERVED:
        return None
    writers = (
        [by_name[name]] if name in by_name else [d for d in by_name.values() if d.path == name]
    )
    path = writers[0].path if writers else name
    if _has(config, path) or any(d.when is None for d in writers):
        return None
    if writers:
        return (
            f"dimension {writers[0].name!r} is sampled only when its `when:` holds, and "
            f"trainer.config has no value at {path!r} for the other trials; give it a default "
            "there"
        )
    try:
        parts = parse_path(name)
    except KeyError:
        parts = [name]
    if len(parts) > 1 and _has(config, str(parts[0])):
        try:
            get_path(config, name)
        except (KeyError, IndexError) as exc:
            detail = exc.args[0] if exc.args else str(exc)
            return f"not in trainer.config: {detail}"
    options = [*RESERVED, *by_name, *dim_paths, *(k for k in config if isinstance(k, str))]
    return (
        f"{name!r} is not a search dimension, a trainer.config field or a reserved name"
        f"{did_you_mean(name, options)} (reserved: "
        f"{', '.join('{' + n + '}' for n in RESERVED)})"
    )


def _has(config: Mapping[str, Any], path: str) -> bool:
    try:
        get_path(config, path)
    except (KeyError, IndexError, TypeError, AttributeError):
        return False
    return True
