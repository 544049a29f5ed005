"""Where the search benchmarks keep their results: a folder, or one packed file per grid.

    python benchmarks/search/result_files.py pack FOLDER benchmarks/search/results/GRID.jsonl.gz
    python benchmarks/search/result_files.py unpack benchmarks/search/results/GRID.jsonl.gz FOLDER

A run writes one JSON file per study, ``CELL/TASK-SEED.json`` under its ``--results`` folder, so
a run cut short resumes where it stopped. A finished grid is packed into ``GRID.jsonl.gz``: one
line per study, ``{"file": "CELL/TASK-SEED.json", "result": {...}}``, sorted by file name and
written with a fixed gzip header, so packing the same folder twice gives the same bytes. Every
reader (``search_efficiency.py --report-only``, ``search_efficiency_paired.py``,
``peers_table.py``) takes either form. Packing keeps the results in the tree at a fraction of
the space and a single file per grid (``benchmarks/search/README.md`` lists them).

Each result written since the packing also says what produced it (:func:`provenance`): the
sampler and pruner the study file resolved to (what ``default`` meant at that commit) and the
commit itself (``+dirty`` when tracked files differed from it).
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import gzip
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PACKED_SUFFIX = ".jsonl.gz"
REPO_ROOT = Path(__file__).resolve().parents[2]


def read_rows(path: Path) -> Iterator[dict[str, Any]]:
    """Every line of an append-only ``.jsonl.gz`` (the suite's results, one gzip member per
    study; the built-in trainer's table): none when the file is missing, and a last line cut
    short by a run stopped mid-write is skipped."""
    if not path.is_file():
        return
    with gzip.open(path, "rt") as fh:
        try:
            for line in fh:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue
        except EOFError:
            return


def is_packed(source: Path) -> bool:
    return source.name.endswith(PACKED_SUFFIX)


def read(source: Path, pattern: str = "*/*.json") -> dict[str, dict[str, Any]]:
    """File name under the folder (``CELL/TASK-SEED.json``) -> the study's JSON, sorted by name,
    from a folder or a packed file; only the names that match ``pattern``."""
    if is_packed(source):
        rows: dict[str, dict[str, Any]] = {}
        with gzip.open(source, "rt", encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    rows[row["file"]] = row["result"]
        return {name: rows[name] for name in sorted(rows) if fnmatch.fnmatchcase(name, pattern)}
    if not source.is_dir():
        return {}
    return {
        path.relative_to(source).as_posix(): json.loads(path.read_text())
        for path in sorted(source.glob(pattern))
    }


def pack(folder: Path, target: Path) -> int:
    """Write every ``*/*.json`` under ``folder`` into ``target``; the number of studies."""
    from dvt_hpo.atomic import write_atomic

    rows = read(folder)
    text = "".join(
        json.dumps({"file": name, "result": result}, sort_keys=True) + "\n"
        for name, result in rows.items()
    )
    buffer = io.BytesIO()
    # mtime 0 and no file name in the header: the same studies give the same bytes.
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as z:
        z.write(text.encode("utf-8"))
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, lambda f: f.write(buffer.getvalue()))
    return len(rows)


def unpack(source: Path, folder: Path) -> int:
    """The packed studies back as one file each (a grid to extend with new runs)."""
    rows = read(source)
    for name, result in rows.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result))
    return len(rows)


@functools.cache
def commit() -> str:
    """The checkout's commit, ``+dirty`` when tracked files differ from it; ``unknown``
    outside a git checkout."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, check=False
        )

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return "unknown"
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except OSError:
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty else "")


def resolved(document: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The sampler and pruner a study document resolves to, as dvt-hpo reads it (``default``
    named: what the defaults are at this commit): ``{"kind": ..., **arguments}`` each."""
    import tempfile

    import yaml

    from dvt_hpo.studyfile import load_spec

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "study.yaml"
        path.write_text(yaml.safe_dump(document))
        study = load_spec(path).study
    return (
        {"kind": study.sampler.kind, **study.sampler.kwargs},
        {"kind": study.pruner.kind, **study.pruner.kwargs},
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name, help_text in (("pack", "FOLDER -> FILE.jsonl.gz"), ("unpack", "FILE -> FOLDER")):
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("source", type=Path)
        cmd.add_argument("target", type=Path)
    args = p.parse_args(argv)
    if args.command == "pack":
        if not args.source.is_dir() or not is_packed(args.target):
            p.error(
                f"pack reads a folder and writes a *{PACKED_SUFFIX} file: got {args.source} -> {args.target}"
            )
        n = pack(args.source, args.target)
    else:
        if not is_packed(args.source) or not args.source.is_file():
            p.error(f"unpack reads a *{PACKED_SUFFIX} file: got {args.source}")
        n = unpack(args.source, args.target)
    print(f"{n} studies: {args.source} -> {args.target}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_ROOT))
    raise SystemExit(main())
