"""The selection and report halves of every family's tasks (``split.json``).

    python benchmarks/search/split.py            # writes split.json (committed; run once)
    python benchmarks/search/split.py --held-out # adds the held-out families, the rest as it is

Each family's tasks, sorted, are shuffled by a seeded generator; the first half (rounded down)
is the *selection* half, on which a default may be chosen, the rest the *report* half, on which
it is measured. A grid that runs on fewer tasks takes the first N of a half in this order, so a
smaller grid is a seeded random subset of that half. The file is the record: the suite reads it
and never recomputes it, so a change of a family's task list cannot move a task between halves
silently.

A *held-out* family (``HELD_OUT``: tasks recorded after the split, for reporting only) has every
task in its report half and none in its selection half; ``--held-out`` adds such a family's
entry, shuffled the same way, and leaves every other entry as the file has it.
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
# Held-out family -> the generator's stream for its order (after the four families' 0-3).
HELD_OUT: dict[str, int] = {"builtin_digits_holdout": 4}


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


def held_out(names: tuple[str, ...], stream: int, seed: int = SEED) -> dict[str, list[str]]:
    """A held-out family's halves: every task reported, in a seeded order."""
    order = sorted(names)
    perm = np.random.default_rng([seed, stream]).permutation(len(order))
    return {"selection": [], "report": [order[j] for j in perm]}


def read_split(path: Path = SPLIT) -> dict[str, dict[str, list[str]]]:
    return json.loads(path.read_text())["families"]


def main(argv: list[str] | None = None) -> int:
    from families import FAMILIES, family

    rules = [p.replace("\n", " ").strip() for p in __doc__.split("\n\n")[2:4]]
    doc = {"seed": SEED, "rule": rules[0], "held_out": rules[1]}
    if "--held-out" in (sys.argv[1:] if argv is None else argv):
        doc |= {k: v for k, v in json.loads(SPLIT.read_text()).items() if k != "held_out"}
    else:
        doc["families"] = make_split({name: family(name).tasks for name in FAMILIES})
    split = doc["families"]
    for name, stream in HELD_OUT.items():
        split[name] = held_out(family(name).tasks, stream)
    SPLIT.write_text(json.dumps(doc, indent=1) + "\n")
    for name, halves in split.items():
        print(f"{name}: {len(halves['selection'])} selection, {len(halves['report'])} report")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
