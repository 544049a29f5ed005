"""The field readers every section of the study file uses, with errors placed at their line.

The plain fields of a section are checked by the one schema engine (:mod:`dvt_hpo.config.schema`,
against the dataclasses of :mod:`dvt_hpo.spec.model`); :class:`Reader` adds the study file's
context: the folder relative paths resolve against and the line of every value (:class:`Doc`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dvt_hpo.config import schema
from dvt_hpo.config.hints import describe
from dvt_hpo.config.paths import format_path, parse_path
from dvt_hpo.config.source import Doc, Key
from dvt_hpo.exceptions import SpecError

__all__ = ["Reader"]


class Reader:
    """Reads the sections of one study file (``path`` absolute, ``shown`` as the user gave it)."""

    def __init__(self, doc: Doc, path: Path, shown: str) -> None:
        self.doc = doc
        self.path = path
        self.dir = path.parent
        self.shown_dir = Path(shown).parent

    def err(self, key: Key, message: str) -> SpecError:
        return self.doc.error(key, message)

    def section(
        self, cls: type, value: Any, key: Key, what: str, *, keys_only: bool = False
    ) -> dict[str, Any]:
        """The given fields of a section (or list item) at ``key``, checked against ``cls``.

        ``keys_only`` checks only that it is a mapping of known keys (the values are read
        later, by :meth:`fields`); a ``None`` section is empty.
        """
        path = format_path(key)
        try:
            if keys_only:
                return dict(schema.check_keys(cls, value, path=path, what=what))
            return schema.read_fields(cls, value, path=path, what=what)
        except SpecError as exc:
            raise self.doc.place(exc) from None

    def value(self, value: Any, key: Key, tp: Any, **rule: Any) -> Any:
        """One value checked as a field of type ``tp`` with :class:`~dvt_hpo.config.schema.Rule`
        ``(**rule)`` would be (for bounds that depend on another field)."""
        try:
            return schema.check_value(value, tp, schema.Rule(**rule), format_path(key))
        except SpecError as exc:
            raise self.doc.place(exc) from None

    def string(self, sec: Mapping[str, Any], key: Key, name: str, what: str) -> str | None:
        """A domain field that is a non-empty string or null (``None`` when absent)."""
        value = sec.get(name)
        if value is None:
            return None
        return self.value(value, (*key, name), str | None, what=what)

    def dotted(self, value: Any, key: Key) -> str:
        if not isinstance(value, str) or not value:
            raise self.err(
                key, f"must be a dotted path such as 'data.batch_size', got {describe(value)}"
            )
        try:
            parse_path(value)
        except KeyError as exc:
            raise self.err(key, f"malformed dotted path: {exc}") from None
        return value

    def resolve(self, text: str) -> Path:
        """A path from the study file, resolved against its folder."""
        return (self.dir / Path(text).expanduser()).resolve()
