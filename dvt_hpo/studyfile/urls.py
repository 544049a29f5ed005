"""Storage URLs as text: ``${VAR}`` expansion and resolution of file paths (secrets are hidden
by :mod:`dvt_hpo.text.redact`).

Pure string work (no database driver is imported), shared by the spec loader, the storage
opener and every message that may quote a URL.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from dvt_hpo.exceptions import SpecError

SQLITE_PREFIX = "sqlite:///"
JOURNAL_PREFIX = "journal:///"

_VARIABLE = re.compile(r"\$(?:\$|\{(?P<body>[^}]*)\}|(?P<bad>\{))")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def expand_env(text: str, *, env: Mapping[str, str] = os.environ) -> str:
    """``text`` with ``${VAR}`` and ``${VAR:-default}`` replaced from ``env``.

    ``${VAR}`` needs ``VAR`` set (an empty value is kept, as in a shell); ``${VAR:-default}``
    uses ``default`` when ``VAR`` is unset or empty. ``$$`` is a literal ``$``; any other
    ``$`` is kept as written (passwords may contain one). Raises :class:`SpecError` naming an
    unset variable or a malformed ``${...}``; the expanded text is never part of a message.
    """

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        if match.group("bad") is not None:
            raise SpecError("'${' without a closing '}': write ${NAME} or ${NAME:-default}")
        body = match.group("body")
        name, sep, default = body.partition(":-")
        if not _NAME.fullmatch(name):
            raise SpecError(
                f"${{{body}}} is not a variable reference: write ${{NAME}} or "
                "${NAME:-default} with NAME made of letters, digits and _"
            )
        value = env.get(name)
        if sep:
            return value if value else default
        if value is None:
            raise SpecError(
                f"environment variable {name} is not set (used as ${{{name}}}): export it, "
                f"or write ${{{name}:-default}}"
            )
        return value

    return _VARIABLE.sub(replace, text)


def resolve_url(url: str, base_dir: Path) -> str:
    """Make relative ``sqlite:///`` and ``journal:///`` paths absolute against ``base_dir``."""
    for prefix in (SQLITE_PREFIX, JOURNAL_PREFIX):
        if url.startswith(prefix):
            rest = url[len(prefix) :]
            if rest == ":memory:" or rest.startswith("/") or rest == "":
                return url
            path, sep, query = rest.partition("?")
            return prefix + str((base_dir / path).resolve()) + sep + query
    return url


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///`` URL (None for other URLs and ``:memory:``)."""
    if not url.startswith(SQLITE_PREFIX):
        return None
    rest = url[len(SQLITE_PREFIX) :].partition("?")[0]
    if rest in ("", ":memory:"):
        return None
    return Path(rest)


def journal_path(url: str) -> Path | None:
    """The log file of a ``journal:///`` URL (None for other URLs)."""
    if not url.startswith(JOURNAL_PREFIX):
        return None
    return Path(url[len(JOURNAL_PREFIX) :])


def storage_kind(url: str) -> str:
    """``sqlite``, ``journal``, or the SQLAlchemy dialect name (``postgresql``, ``mysql``)."""
    if url.startswith(JOURNAL_PREFIX):
        return "journal"
    return url.split(":", 1)[0].split("+", 1)[0]
