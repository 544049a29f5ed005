"""``trainer.command``'s placeholders: how ``["--lr={lr}", "{config}"]`` is parsed and rendered.

One parser for the study loader (every placeholder must resolve, before anything runs) and the
trial process (which renders the command with the trial's values). Stdlib only.

A placeholder is ``{name}``: a reserved name (:data:`RESERVED`), a search dimension's name, or a
dotted field of the trial's resolved config (``{optim.lr}``, ``{layers[0].units}``); ``{{`` and
``}}`` are literal braces; a placeholder may be part of an argument (``--lr={lr}``). Format
specs and conversions (``{lr:.3f}``, ``{lr!r}``) are refused: the script must get exactly the
value the study records for the trial.
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["RESERVED", "TemplateError", "placeholders", "render", "render_value"]

# name -> what it stands for (the study loader's messages list them).
RESERVED = {
    "config": "the trial's resolved config as YAML (a file in the trial folder)",
    "config_json": "the same config as JSON",
    "trial_dir": "the trial's folder",
    "trial_number": "the trial's number",
    "python": "the Python interpreter running dvt-hpo (the same virtual environment)",
    # trials.resume: the script writes its state there and reads it when it is not empty.
    "resume_dir": "the trial's resume folder (trials.resume; else an empty folder)",
}

_formatter = string.Formatter()


class TemplateError(ValueError):
    """An argument of the command that is not a valid template."""


def placeholders(arg: str) -> list[str]:
    """The placeholder names of one argument, in order."""
    names: list[str] = []
    try:
        parsed = list(_formatter.parse(arg))
    except ValueError as exc:
        raise TemplateError(f"{arg!r}: {exc}; write {{{{ and }}}} for literal braces") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.strip():
            raise TemplateError(
                f"{arg!r} has an empty placeholder {{}}; name a dimension or config field, or "
                "write {{}} for literal braces"
            )
        if conversion or spec:
            written = (
                "{"
                + name
                + (f"!{conversion}" if conversion else "")
                + (f":{spec}" if spec else "")
                + "}"
            )
            raise TemplateError(
                f"{arg!r}: {written} has a format spec or conversion; write {{{name}}}: "
                "the script gets the exact value the study records (floats as repr)"
            )
        names.append(name)
    return names


def render_value(value: Any) -> str:
    """A value as a command-line argument: strings as they are, booleans ``true``/``false``,
    ``null`` for None, floats with ``repr`` (``1e-05`` stays exact), lists and mappings as
    compact JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    if isinstance(value, int):
        return str(value)
    return json.dumps(value, separators=(",", ":"), allow_nan=True, default=str)


def render(argv: Sequence[str], lookup: Callable[[str], Any]) -> list[str]:
    """Each argument with its placeholders replaced by ``render_value(lookup(name))``."""
    out: list[str] = []
    for arg in argv:
        placeholders(arg)  # the same checks as at load time
        parts: list[str] = []
        for literal, name, _, _ in _formatter.parse(arg):
            parts.append(literal)
            if name is not None:
                parts.append(render_value(lookup(name)))
        out.append("".join(parts))
    return out
