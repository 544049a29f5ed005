"""Byte sizes such as 4GiB (dvt_hpo.config.units)."""

from __future__ import annotations

import pytest

from dvt_hpo.config.units import parse_bytes


@pytest.mark.parametrize(
    ("text", "size"),
    [
        (4096 * 1024, 4096 * 1024),
        ("4GiB", 4 * 1024**3),
        ("512MiB", 512 * 1024**2),
        ("2GB", 2 * 1000**3),
        ("1.5G", int(1.5 * 1024**3)),
        ("100 mb", 100 * 1000**2),
        ("64Mi", 64 * 1024**2),
    ],
)
def test_parse_bytes(text: int | str, size: int) -> None:
    assert parse_bytes(text) == size


@pytest.mark.parametrize("text", ["4 gigs", "GiB", "-1G", "", "1e3G", True, 0, 1.5])
def test_parse_bytes_rejects(text: object) -> None:
    with pytest.raises(ValueError):
        parse_bytes(text)  # type: ignore[arg-type]
