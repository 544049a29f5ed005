"""The selection and report halves of every family's tasks (``split.json``).

    python benchmarks/search/split.py            # writes split.json (committed; run once)

Each family's tasks, sorted, are shuffled by a seeded generator; the first half (rounded down)
is the *selection* half, on which a default may be chosen, the rest the *report* half, on which
it is measured. A grid that runs on fewer tasks takes the first N of a half in this order, so a
smaller grid is a seeded random subset of that half. The file is the record: the suite reads it
and never recomputes it, so a change of a family's task list cannot move a task between halves
silently.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
SPLIT = HERE / "split.json"
SEED = 20261203


def make_split(
    tasks: dict[str, tuple[str, ...]], seed: int = SEED
) -> dict[str, dict[str, list[str]]]:
    out = {}
    for i, (name, names) in enumerate(sorted(tasks.items())):
        order = sorted(names)
        perm = np.random.default_rng([seed, i]).permutation(len(order))
        shuffled = [order[j] for j in perm]
        half = len(shuffled) // 2
        out[name] = {"selection": shuffled[:half], "report": shuffled[half:]}
    return out


def read_split(path: Path = SPLIT) -> dict[str, dict[str, list[str]]]:
    return json.loads(path.read_text())["families"]


def main() -> int:
    from families import FAMILIES, family

    split = make_split({name: family(name).tasks for name in FAMILIES})
    doc = {"seed": SEED, "rule": __doc__.split("\n\n")[2].replace("\n", " "), "families": split}
    SPLIT.write_text(json.dumps(doc, indent=1) + "\n")
    for name, halves in split.items():
        print(f"{name}: {len(halves['selection'])} selection, {len(halves['report'])} report")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
