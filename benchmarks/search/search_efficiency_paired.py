"""Cells against the default, paired by task, from ``search_efficiency.py``'s results.

    python benchmarks/search/search_efficiency_paired.py --results R --cells tpe+none,default,A,B

``R``: a folder of results, or a packed grid (``benchmarks/search/results/GRID.jsonl.gz``).

Per task, each cell's median over seeds of the epochs to TPE's final regret (as the report's
column; a seed that never gets there counts as budget + 1) and its regret at 25/50/100 %
(mean over seeds, as the report's table); then, for each cell against ``default``: on how many
tasks it is sooner or later (with a two-sided sign test over the tasks that differ), a
bootstrap over tasks of the difference in the median task's epochs, and on how many tasks its
regret is lower or higher. The medians of the report hide how much a few tasks move them.
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections import defaultdict
from pathlib import Path

import search_efficiency as se
import search_efficiency_report as report
from scipy.stats import binomtest

BOOTSTRAP = 2000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, required=True, help="a folder, or a packed grid")
    p.add_argument("--cells", required=True, help="comma-separated; tpe+none and default needed")
    args = p.parse_args(argv)
    cells = args.cells.split(",")
    runs = se.load_cells(args.results, cells)
    budget = runs[0].budget_epochs
    refs = report.references(runs, se.SURROGATE)
    target = report.regret_targets(runs, refs, budget)
    per: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in runs:
        reached = report.epochs_to_reach(r, refs[r.task], target[r.task], budget)
        per[(r.cell, r.task)].append(min(reached, budget + 1))
    med = {k: statistics.median(v) for k, v in per.items()}
    tasks = sorted(target)
    curves = report.curves(runs, refs, [round(f * budget) for f in report.FRACTIONS])
    rng = random.Random(0)
    print(
        "| cell | epochs sooner / later (tasks) | sign test p | median epochs vs default, "
        "5 / 50 / 95 % | lower / higher regret @25% | @50% | @100% |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for c in cells:
        if c in (report.DEFAULT, report.BASELINE):
            continue
        sooner = sum(med[(c, t)] < med[(report.DEFAULT, t)] for t in tasks)
        later = sum(med[(c, t)] > med[(report.DEFAULT, t)] for t in tasks)
        diffs = sorted(
            statistics.median(med[(c, t)] for t in sample)
            - statistics.median(med[(report.DEFAULT, t)] for t in sample)
            for sample in ([rng.choice(tasks) for _ in tasks] for _ in range(BOOTSTRAP))
        )
        lo, mid, hi = (diffs[int(q * BOOTSTRAP)] for q in (0.05, 0.5, 0.95))
        regrets = []
        for i in range(len(report.FRACTIONS)):
            lower = sum(curves[c][t][i] < curves[report.DEFAULT][t][i] for t in tasks)
            higher = sum(curves[c][t][i] > curves[report.DEFAULT][t][i] for t in tasks)
            regrets.append(f"{lower} / {higher}")
        pvalue = binomtest(sooner, sooner + later).pvalue if sooner + later else 1.0
        print(
            f"| {c} | {sooner} / {later} | {pvalue:.3f} | {lo:+.0f} / {mid:+.0f} / {hi:+.0f} | "
            + " | ".join(regrets)
            + " |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
