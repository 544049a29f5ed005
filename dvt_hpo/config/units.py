"""Human-readable quantities: byte sizes such as ``"4GiB"``, ``"512MB"`` or ``"1.5G"``.

Pure (stdlib only).
"""

from __future__ import annotations

import re

__all__ = ["BYTE_UNITS", "format_bytes", "parse_bytes"]

_KIB = 1024
# Decimal units (kB, MB, GB, TB) are powers of 1000 as in SI; IEC units (KiB, MiB, ...) and
# the bare letters (K, M, G, T, as in ``docker --memory`` and ``ulimit``) are powers of 1024.
BYTE_UNITS: dict[str, int] = {
    "b": 1,
    "k": _KIB,
    "kb": 1000,
    "ki": _KIB,
    "kib": _KIB,
    "m": _KIB**2,
    "mb": 1000**2,
    "mi": _KIB**2,
    "mib": _KIB**2,
    "g": _KIB**3,
    "gb": 1000**3,
    "gi": _KIB**3,
    "gib": _KIB**3,
    "t": _KIB**4,
    "tb": 1000**4,
    "ti": _KIB**4,
    "tib": _KIB**4,
}
_ALLOWED_TEXT = "B, K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024) or kB, MB, GB, TB (powers of 1000)"
_SIZE_RE = re.compile(r"^\s*(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(?P<unit>[A-Za-z]*)\s*$")


def parse_bytes(value: int | str) -> int:
    """A byte count from an int or a string with a unit: ``"4GiB"`` -> 4294967296.

    Units are case-insensitive. Raises ``ValueError`` stating the accepted forms.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(
            f"expected a byte count (an integer) or a size string such as '4GiB', got {value!r}"
        )
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"a byte count must be >= 1, got {value}")
        return value
    match = _SIZE_RE.match(value)
    if match is None:
        raise ValueError(
            f"expected a size such as '4GiB', '512MiB', '2GB' or '1.5G', got {value!r}; "
            f"units: {_ALLOWED_TEXT}"
        )
    unit = match["unit"].lower()
    if unit not in BYTE_UNITS:
        raise ValueError(
            f"unknown size unit {match['unit']!r} in {value!r}; units: {_ALLOWED_TEXT}"
        )
    size = int(float(match["number"]) * BYTE_UNITS[unit])
    if size < 1:
        raise ValueError(f"a size must be at least 1 byte, got {value!r}")
    return size


def format_bytes(size: int) -> str:
    """A short binary-unit rendering: 4294967296 -> ``"4GiB"``, 1536 -> ``"1.5KiB"``."""
    for unit, factor in (("TiB", _KIB**4), ("GiB", _KIB**3), ("MiB", _KIB**2), ("KiB", _KIB)):
        if size >= factor:
            return f"{size / factor:.4g}{unit}"
    return f"{size}B"
