"""The one atomic writer: a reader sees the old file or the new one, never half of either, and
a failed write leaves no temporary file behind."""

from __future__ import annotations

import math
from pathlib import Path
from typing import IO

import pytest

from dvt_hpo.atomic import (
    copy_atomic,
    read_json,
    write_atomic,
    write_json_atomic,
    write_text_atomic,
)


def test_json_round_trips_with_nan_and_infinity(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    write_json_atomic(path, {"loss": math.nan, "best": math.inf, "steps": [1, 2]})
    back = read_json(path)
    assert math.isnan(back["loss"]) and back["best"] == math.inf and back["steps"] == [1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_a_missing_or_half_written_json_file_reads_as_none(tmp_path: Path) -> None:
    assert read_json(tmp_path / "missing.json") is None
    (tmp_path / "half.json").write_text('{"loss": 0.')
    assert read_json(tmp_path / "half.json") is None


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "payload.json"
    write_text_atomic(path, "old")

    def half(f: IO[bytes]) -> None:
        f.write(b"ne")
        raise KeyboardInterrupt  # even a Ctrl-C in the middle

    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, half)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["payload.json"]


def test_a_copy_replaces_the_target_whole(tmp_path: Path) -> None:
    src, dst = tmp_path / "src.bin", tmp_path / "dst.bin"
    data = bytes(range(256)) * 5000  # more than one chunk
    src.write_bytes(data)
    dst.write_bytes(b"previous")
    copy_atomic(src, dst)
    assert dst.read_bytes() == data
