"""The peers' table: Ray Tune and Syne Tune next to dvt-hpo on the same LCBench studies.

    python benchmarks/search/peers_table.py              # from benchmarks/search/results/peers.jsonl.gz
    python benchmarks/search/peers_table.py --with R4    # + dvt-hpo's 4-at-a-time results

Reads the peers' result files (``peer_ray.py``, ``peer_syne.py``), runs dvt-hpo's ``default``,
its default before (``tpe-uni-ce+wilcoxon-halving``) and ``tpe+none`` on the same tasks and seeds with
``search_efficiency``'s replay engine (one trial at a time, the same study files as ``dvt-hpo run``), and prints, one trial at a time and
4 at a time, the normalized regret at 25/50/100 % of the budget and the epochs to TPE-without-
pruning's final regret, computed by ``search_efficiency_report``'s own functions (the
reference ``y*`` includes every value any study of the table found). ``--with DIR`` adds
dvt-hpo's own 4-at-a-time runs of those cells from ``DIR`` (named with ``@4``).

A cell that does not have every (task, seed) pair (a run cut short, or MOBSTER, which costs
minutes per study) gets its own table on the pairs it has, with every other cell restricted
to them: like is compared with like.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import peer_common as pc  # noqa: E402
import result_files  # noqa: E402
import search_efficiency as se  # noqa: E402
import search_efficiency_report as report  # noqa: E402

# dvt-hpo's rows: its default, the default before issue 31's sixth round (TPE univariate with
# consider_endpoints, successive halving and Wilcoxon) and TPE without pruning.
DVT_CELLS = ("default", "tpe-uni-ce+wilcoxon-halving", "tpe+none")


def load_cells(
    folder: Path, tasks: set[str], seeds: set[int], cells: tuple[str, ...] | None = None
) -> list[Any]:
    """The results in ``folder`` (a folder of result files, or a packed grid) on those tasks
    and seeds (of ``cells`` only, if given: a folder of dvt-hpo's runs also holds candidates
    that are not rows here)."""
    out = []
    for name, raw in result_files.read(folder).items():
        cell, stem = name.removesuffix(".json").split("/")
        task, seed = stem.rsplit("-", 1)
        if task in tasks and int(seed) in seeds and (cells is None or cell in cells):
            out.append(se.from_json(raw))
    return out


def table(runs: list[Any], budget: int) -> list[str]:
    """Markdown rows: cell, regret at each fraction, epochs to TPE's final, trials/study."""
    refs = report.references(runs, se.SURROGATE)
    points = [round(f * budget) for f in report.FRACTIONS]
    curves = report.curves(runs, refs, points)
    reach = report.epochs_to_target(runs, refs, budget)
    by_cell: dict[str, list[Any]] = defaultdict(list)
    for r in runs:
        by_cell[r.cell].append(r)
    lines = [
        "| cell | median regret @25% | @50% | @100% | epochs to TPE's final (% of budget) "
        "| trials/study |",
        "| --- | --- | --- | --- | --- | --- |",
    ]

    def med(cell: str, i: int) -> float:
        return report._median(v[i] for v in curves[cell].values())

    for cell in sorted(curves, key=lambda c: (med(c, 1), med(c, 2))):
        epochs = reach.get(cell, math.nan)
        text = (
            "-"
            if math.isinf(epochs) or math.isnan(epochs)
            else f"{epochs:.0f} ({100 * epochs / budget:.0f}%)"
        )
        trials = report._median(len(r.trials) for r in by_cell[cell])
        regrets = " | ".join(report._fmt(med(cell, i)) for i in range(len(points)))
        lines.append(f"| {cell} | {regrets} | {text} | {trials:.0f} |")
    return lines


def render(runs: list[Any], budget: int, title: str) -> list[str]:
    """The table over the (task, seed) pairs of the best-covered cells, then one per
    less-covered group of cells, on the pairs those have."""
    pairs: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for r in runs:
        pairs[r.cell].add((r.task, r.seed))
    groups: dict[frozenset[tuple[str, int]], list[str]] = defaultdict(list)
    for cell, have in pairs.items():
        groups[frozenset(have)].append(cell)
    out: list[str] = []
    for have in sorted(groups, key=len, reverse=True):
        common = set(have)
        cells = [c for c, p in pairs.items() if common <= p]
        if not common or len(cells) < 2:
            continue
        sub = [r for r in runs if r.cell in cells and (r.task, r.seed) in common]
        tasks = sorted({t for t, _ in common})
        seeds = sorted({s for _, s in common})
        out += [
            "",
            f"{title}: {len(common)} (task, seed) pairs ({len(tasks)} tasks, seeds "
            f"{', '.join(map(str, seeds))}), {len(cells)} cells, budget {budget} epochs",
            "",
            *table(sub, budget),
        ]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--results", type=Path, default=pc.RESULTS, help="the peers' results (folder or packed)"
    )
    p.add_argument(
        "--with",
        dest="extra",
        type=Path,
        action="append",
        default=[],
        help="more results (folder or packed grid), e.g. benchmarks/search/results/GRID.jsonl.gz",
    )
    p.add_argument("--tasks", default=",".join(pc.PEER_TASKS))
    p.add_argument("--seeds", type=int, default=len(pc.PEER_SEEDS))
    p.add_argument("--dvt-results", type=Path, help="keep dvt-hpo's replayed studies here")
    args = p.parse_args(argv)
    tasks, seeds = args.tasks.split(","), list(range(args.seeds))
    budget = pc.BUDGET_EPOCHS
    peers = load_cells(args.results, set(tasks), set(seeds))
    for folder in args.extra:
        # dvt-hpo's own 4-at-a-time runs are named as their one-at-a-time cells ("default"):
        # named "@4" here, so they are not taken for the replayed rows of the first table.
        peers += [
            r if "@" in r.cell else dataclasses.replace(r, cell=f"{r.cell}@4")
            for r in load_cells(folder, set(tasks), set(seeds), DVT_CELLS)
        ]
    # dvt-hpo on the (task, seed) pairs some peer has.
    have = sorted({(r.task, r.seed) for r in peers})
    dvt_folder = args.dvt_results or Path(tempfile.mkdtemp(prefix="peers-dvt-"))
    for seed in sorted({s for _, s in have}):
        se.run_grid(
            list(DVT_CELLS),
            sorted({t for t, s in have if s == seed}),
            [seed],
            budget,
            dvt_folder,
            jobs=1,
            engine="replay",
            out=lambda *_: None,
        )
    dvt = load_cells(dvt_folder, set(tasks), set(seeds))
    one = [r for r in peers if "@" not in r.cell]
    four = [r for r in peers if "@" in r.cell]
    lines = ["dvt-hpo's rows: the replay engine, one trial at a time."]
    lines += render(one + dvt, budget, "One trial at a time")
    if four:
        lines += render(four + dvt, budget, "4 trials at a time (cells @4)")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
