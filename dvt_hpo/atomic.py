"""Atomic file writes: readers never see a half-written file.

One writer for every file the project replaces in place (trial payloads, result files, exported
configs, checkpoints): write to a temporary file beside the target, fsync, rename over it.
The rename is atomic on POSIX file systems, so a crash leaves the old file or the new one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def _tmp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def write_atomic(path: str | os.PathLike[str], write: Callable[[IO[bytes]], None]) -> None:
    """Call ``write(f)`` on a temporary binary file beside ``path``, fsync, rename over ``path``.

    The temporary file is removed when ``write`` raises."""
    target = Path(path)
    tmp = _tmp_path(target)
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))


def write_json_atomic(path: str | os.PathLike[str], data: Any, *, indent: int | None = 1) -> None:
    """JSON (NaN and infinities allowed, as Python's json writes them) written atomically."""
    write_text_atomic(path, json.dumps(data, indent=indent, allow_nan=True))


def read_json(path: str | os.PathLike[str]) -> Any | None:
    """The JSON in ``path``, or None when the file is missing or not (yet) valid JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def copy_atomic(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    def write(f: IO[bytes]) -> None:
        with open(src, "rb") as s:
            while chunk := s.read(1 << 20):
                f.write(chunk)

    write_atomic(dst, write)


__all__ = ["copy_atomic", "read_json", "write_atomic", "write_json_atomic", "write_text_atomic"]
