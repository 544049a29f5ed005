"""Tables of the search suite's results, per family and half, and the goals of the default.

    python benchmarks/search/suite_report.py benchmarks/search/results/final.jsonl.gz [--half report]

Normalized regret after E steps: ``(y* - y) / (y* - y_med)``, ``y`` the best value of the trials
that *completed* within E steps, ``y*`` the best final value known for the task (random configs
and every study in the file), ``y_med`` the median final value of random configs (for the
built-in trainer's table: its recorded configs). It is averaged over a task's seeds; a table
shows the median over tasks. "To TPE's final": the share of the budget a cell needs until its
regret is within 0.01 of TPE-without-pruning's final regret on the same task (median over seeds,
"-" when over half never get there; then the median over tasks).

Goals (on the report half, per family, at the median task): the default's regret at 100 % no
worse than ``tpe+none``'s nor ``tpe+median``'s; at 50 % lower than both; TPE's final reached
within 50 % of the budget (35 % on LCBench).

Pause cells (``sampler+pruner+pause``, ``trials.pause``): a continuation's steps are those it
trained after its chain's pause, so the budget counts each step once; "trials" counts configs (a
continuation is not a new trial) and "cont." the continuations per study. With ``--pause`` the
table puts each pause cell beside its stopping twin and the default, and its goals are the
pause goals: TPE's final reached within 20 % of the budget on LCBench and 35 % on every family,
and at 25 % and 50 % ahead of every peer (``syne-*``, ``ray-*`` rows) in the files.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from cells import DEFAULT, TPE_MEDIAN, TPE_NONE, is_pause, twin  # noqa: E402
from result_files import read_rows  # noqa: E402

FRACTIONS = (0.25, 0.5, 1.0)
WITHIN = 0.01
GOAL_SHARE = {"lcbench": 0.35}
GOAL_SHARE_ELSE = 0.5
PAUSE_GOAL_SHARE = {"lcbench": 0.20}
PAUSE_GOAL_SHARE_ELSE = 0.35
PEER_PREFIXES = ("syne-", "ray-", "smac-", "dehb")


def incumbent_curve(trials: Sequence[Sequence[Any]]) -> list[tuple[int, float | None]]:
    """(steps spent, best complete value so far) after each trial."""
    out, spent, best = [], 0, None
    for trial in trials:  # number, state, steps, value[, the paused trial it continues]
        steps, value = trial[2], trial[3]
        spent += steps
        if value is not None and (best is None or value > best):
            best = value
        out.append((spent, best))
    return out


def best_within(curve: list[tuple[int, float | None]], steps: float) -> float | None:
    best = None
    for spent, value in curve:
        if spent > steps:
            break
        best = value
    return best


def regret(value: float | None, ref: tuple[float, float]) -> float:
    if value is None:
        return math.inf
    top, median = ref
    return max(0.0, top - value) / max(top - median, 1e-12)


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def reference(fam: str, task: str, runs: list[dict[str, Any]]) -> tuple[float, float]:
    """(best value known, median random value) of a task: the family's, raised by any study."""
    from families import family

    top, med = family(fam).reference(task)
    seen = [t[3] for r in runs for t in r["trials"] if t[3] is not None]
    return max([top, *seen]), med


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per family, per cell: median regret at each fraction, share to TPE's final, trials."""
    by_task: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_task[(r["family"], r["task"])].append(r)
    per_task: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    for (fam, task), runs in by_task.items():
        ref = reference(fam, task, runs)
        cells: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in runs:
            cells[r["cell"]].append(r)
        stats: dict[str, dict[str, float]] = {}
        for cell, cr in cells.items():
            budget = cr[0]["budget"]
            curves = [incumbent_curve(r["trials"]) for r in cr]
            s = {
                f"r{f}": statistics.mean(regret(best_within(c, f * budget), ref) for c in curves)
                for f in FRACTIONS
            }
            # A continuation is not a new trial (its row has a 5th field).
            s["trials"] = statistics.mean(sum(len(t) <= 4 for t in r["trials"]) for r in cr)
            s["cont"] = statistics.mean(r.get("continuations", 0) for r in cr)
            s["_curves"] = curves  # type: ignore[assignment]
            s["budget"] = budget
            stats[cell] = s
        if TPE_NONE in stats:
            target = stats[TPE_NONE]["r1.0"] + WITHIN
            for s in stats.values():
                shares = []
                for c in s["_curves"]:  # type: ignore[union-attr]
                    reached = [spent for spent, v in c if regret(v, ref) <= target]
                    shares.append(reached[0] / s["budget"] if reached else math.inf)
                s["share"] = _median(shares)
        per_task[(fam, task)] = stats
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    fams = sorted({fam for fam, _ in per_task})
    for fam in fams:
        tasks = [st for (f, _), st in per_task.items() if f == fam]
        cells = sorted({c for st in tasks for c in st})
        for cell in cells:
            have = [st[cell] for st in tasks if cell in st]
            out[fam][cell] = {
                **{f"r{f}": _median([h[f"r{f}"] for h in have]) for f in FRACTIONS},
                "share": _median([h.get("share", math.nan) for h in have]),
                "trials": _median([h["trials"] for h in have]),
                "cont": _median([h["cont"] for h in have]),
                "tasks": len(have),
                "seeds": _median([len(h["_curves"]) for h in have]),
            }
    return out


def _fmt(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:.3f}"


def goals(fam: str, cells: dict[str, dict[str, Any]], cell: str = DEFAULT) -> list[str]:
    """The goals ``cell`` misses on ``fam`` (empty when it meets them all)."""
    if cell not in cells or TPE_NONE not in cells or TPE_MEDIAN not in cells:
        return ["not measured"]
    d, a, b = cells[cell], cells[TPE_NONE], cells[TPE_MEDIAN]
    missed = []
    if d["r1.0"] > min(a["r1.0"], b["r1.0"]) + 1e-12:
        missed.append(f"@100% {d['r1.0']:.3f} > {min(a['r1.0'], b['r1.0']):.3f}")
    if not d["r0.5"] < min(a["r0.5"], b["r0.5"]):
        missed.append(f"@50% {d['r0.5']:.3f} >= {min(a['r0.5'], b['r0.5']):.3f}")
    goal = GOAL_SHARE.get(fam, GOAL_SHARE_ELSE)
    if not d["share"] <= goal:
        missed.append(f"to TPE's final {_fmt(d['share'])} > {goal:.0%}")
    return missed


def pause_goals(fam: str, cells: dict[str, dict[str, Any]], cell: str) -> list[str]:
    """The pause goals ``cell`` misses on ``fam`` (empty when it meets them all): TPE's final
    within 20 % of the budget on LCBench and 35 % elsewhere; at 25 and 50 % ahead of every peer
    in the table (none there: said)."""
    c = cells[cell]
    missed = []
    goal = PAUSE_GOAL_SHARE.get(fam, PAUSE_GOAL_SHARE_ELSE)
    if not c["share"] <= goal:
        missed.append(f"to TPE's final {_fmt(c['share'])} > {goal:.0%}")
    peers = [p for p in cells if p.startswith(PEER_PREFIXES)]
    if not peers:
        missed.append("no peer measured")
    for f in (0.25, 0.5):
        for peer in peers:
            if not c[f"r{f}"] < cells[peer][f"r{f}"]:
                missed.append(f"@{f:.0%} {_fmt(c[f'r{f}'])} >= {peer} {_fmt(cells[peer][f'r{f}'])}")
    return missed


def _order(cells: dict[str, dict[str, Any]], pause: bool) -> list[str]:
    """Best at 50 % first; with ``pause``: each pause cell then its stopping twin, the rest
    after."""
    ranked = sorted(cells, key=lambda c: (cells[c]["r0.5"], cells[c]["r1.0"], c))
    if not pause:
        return ranked
    out: list[str] = []
    for cell in ranked:
        if is_pause(cell):
            out += [c for c in (cell, twin(cell)) if c in cells and c not in out]
    return out + [c for c in ranked if c not in out]


def _unseeded(spec: Any) -> Any:
    return {k: v for k, v in spec.items() if k != "seed"} if isinstance(spec, dict) else spec


def render(rows: list[dict[str, Any]], half: str | None = None, pause: bool = False) -> str:
    if half:
        rows = [r for r in rows if r["half"] == half]
    table = summarize(rows)
    lines = []
    for fam, cells in table.items():
        fidelity = next(r["fidelity"] for r in rows if r["family"] == fam)
        n = max(c["tasks"] for c in cells.values())
        seeds = max(c["seeds"] for c in cells.values())
        paused = any(is_pause(c) for c in cells)
        lines += [
            "",
            f"{fam} ({half or 'all'} half; {n} tasks x {seeds:.0f} seeds; steps: {fidelity})",
            "",
            "| cell | @25% | @50% | @100% | to TPE's final | trials |"
            + (" cont. |" if paused else "")
            + " goals |",
            "| --- | --- | --- | --- | --- | --- |" + (" --- |" if paused else "") + " --- |",
        ]
        for cell in _order(cells, pause):
            c = cells[cell]
            if pause and is_pause(cell):
                missed = pause_goals(fam, cells, cell)
            elif pause and cell != DEFAULT:
                missed = None
            else:
                missed = goals(fam, cells, cell)
            said = "" if missed is None else ("met" if not missed else "; ".join(missed))
            lines.append(
                f"| {cell} | {_fmt(c['r0.25'])} | {_fmt(c['r0.5'])} | {_fmt(c['r1.0'])} | "
                f"{_fmt(c['share'])} | {c['trials']:.0f} |"
                + (f" {c['cont']:.0f} |" if paused else "")
                + f" {said} |"
            )
    if pause:
        lines += _pause_vs_twin(table)
    # The seed is the study's, not the default's: one line per family and resolution.
    resolved = sorted(
        {
            f"{r['family']}: {_unseeded(r['sampler'])} + {_unseeded(r['pruner'])}"
            for r in rows
            if r["cell"] == DEFAULT
        }
    )
    if resolved:
        lines += ["", "default resolved to:", *(f"  {x}" for x in resolved)]
    return "\n".join(lines)


def by_task(rows: list[dict[str, Any]]) -> str:
    """Each task's regret at 50 and 100 % per cell (the mean over its seeds), per family: what
    a median over tasks hides."""
    lines = []
    for fam in sorted({r["family"] for r in rows}):
        mine = [r for r in rows if r["family"] == fam]
        cells = sorted({r["cell"] for r in mine})
        lines += [
            "",
            f"{fam}, each task at 50 / 100 %",
            "",
            "| task | " + " | ".join(cells) + " |",
            "| --- |" + " --- |" * len(cells),
        ]
        for task in sorted({r["task"] for r in mine}):
            stats = summarize([r for r in mine if r["task"] == task])[fam]
            lines.append(
                f"| {task} | "
                + " | ".join(
                    f"{_fmt(stats[c]['r0.5'])} / {_fmt(stats[c]['r1.0'])}"
                    if c in stats
                    else "not run"
                    for c in cells
                )
                + " |"
            )
    return "\n".join(lines)


def _pause_vs_twin(table: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """Each pause cell against its stopping twin, per family (regret: pause / twin)."""
    lines = [
        "",
        "pause against its stopping twin (pause / twin; lower is better)",
        "",
        "| family | pause cell | @25% | @50% | @100% | to TPE's final | cont. per study |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for fam, cells in table.items():
        for cell in _order(cells, True):
            t = twin(cell)
            if not is_pause(cell) or t not in cells:
                continue
            a, b = cells[cell], cells[t]
            pairs = [f"{_fmt(a[k])} / {_fmt(b[k])}" for k in ("r0.25", "r0.5", "r1.0", "share")]
            lines.append(f"| {fam} | {cell} | {' | '.join(pairs)} | {a['cont']:.0f} |")
    return lines


def sign_test_p(wins: int, losses: int) -> float:
    """Two-sided sign test (ties left out): how likely a split at least this uneven is when
    either cell is as likely to win a study."""
    from scipy.stats import binomtest

    return float(binomtest(wins, wins + losses).pvalue) if wins + losses else 1.0


def paired(rows: list[dict[str, Any]], a: str, b: str) -> str:
    """``a`` against ``b`` study by study (the same family, task and seed): how often each
    ends with the lower regret at 25, 50 and 100 % of the budget, and the sign test's p. The
    medians over tasks hide how often a cell wins; this says whether a gap is more than the
    seeds' spread."""
    by_task: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_task[(r["family"], r["task"])].append(r)
    # family -> fraction -> [a better, tie, b better]
    counts: dict[str, dict[float, list[int]]] = defaultdict(
        lambda: {f: [0, 0, 0] for f in FRACTIONS}
    )
    for (fam, task), runs in by_task.items():
        ref = reference(fam, task, runs)
        of = {(r["cell"], r["seed"]): r for r in runs}
        for (cell, seed), ra in of.items():
            rb = of.get((b, seed))
            if cell != a or rb is None:
                continue
            ca, cb = incumbent_curve(ra["trials"]), incumbent_curve(rb["trials"])
            for f in FRACTIONS:
                x = regret(best_within(ca, f * ra["budget"]), ref)
                y = regret(best_within(cb, f * rb["budget"]), ref)
                counts[fam][f][0 if x < y - 1e-12 else 2 if y < x - 1e-12 else 1] += 1
    lines = [
        "",
        f"{a} against {b}, study by study (the same task and seed; lower regret wins)",
        "",
        f"| family | @ | {a} better | tie | {b} better | sign test p |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for fam, by_f in sorted(counts.items()):
        for f, (wins, ties, losses) in by_f.items():
            p = sign_test_p(wins, losses)
            lines.append(f"| {fam} | {f:.0%} | {wins} | {ties} | {losses} | {p:.3g} |")
    if not counts:
        lines.append(f"(no study of {a} has a study of {b} on the same task and seed)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, nargs="+")
    p.add_argument("--half", choices=("selection", "report"))
    p.add_argument("--families", help="comma-separated (default: every family in the files)")
    p.add_argument("--cells", help="comma-separated (default: every cell in the files)")
    p.add_argument(
        "--pause",
        action="store_true",
        help="each pause cell beside its stopping twin, the pause goals, and pause against twin",
    )
    p.add_argument("--by-task", action="store_true", help="also each task's row, per family")
    p.add_argument(
        "--paired",
        metavar="A,B",
        help="also cell A against cell B study by study: wins, ties and the sign test",
    )
    args = p.parse_args(argv)
    pair = args.paired.split(",") if args.paired else []
    if args.paired and len(pair) != 2:
        p.error(f"--paired takes two cells, A,B; got {args.paired!r}")
    rows, seen = [], set()
    for path in args.results:
        for r in read_rows(path):
            key = (r["family"], r["task"], r["cell"], r["seed"])
            if key not in seen:  # a study in two files: the first file's
                seen.add(key)
                rows.append(r)
    if args.families:
        rows = [r for r in rows if r["family"] in args.families.split(",")]
    if args.cells:
        rows = [r for r in rows if r["cell"] in args.cells.split(",")]
    # Only (task, seed) pairs every cell of the family has: a grid cut short compares like with like.
    cells_of: dict[str, set[str]] = defaultdict(set)
    have: dict[tuple[str, str, int], set[str]] = defaultdict(set)
    for r in rows:
        cells_of[r["family"]].add(r["cell"])
        have[(r["family"], r["task"], r["seed"])].add(r["cell"])
    rows = [r for r in rows if have[(r["family"], r["task"], r["seed"])] == cells_of[r["family"]]]
    print(render(rows, args.half, pause=args.pause))
    in_half = [r for r in rows if not args.half or r["half"] == args.half]
    if args.by_task:
        print(by_task(in_half))
    if pair:
        print(paired(in_half, *pair))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
