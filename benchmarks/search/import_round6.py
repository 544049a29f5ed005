"""The LCBench studies of the search-efficiency benchmark's sixth round (replayed, checked
identical to ``dvt-hpo run``; commit bac83cc) on the *report* half's tasks, as suite results.

    python benchmarks/search/result_files.py unpack benchmarks/search/results/full-round6.jsonl.gz /tmp/full-round6
    python benchmarks/search/import_round6.py /tmp/full-round6 --seeds 5

That round's ``default`` is ``mf_gp`` + ``wilcoxon`` (today's default on LCBench), beside
``tpe+none`` and the default before it (``tpe-uni-ce+wilcoxon-halving``), on every task × 20
seeds; a study of the suite on LCBench is the same search (checked by
``--verify``: the suite's replay of one imported study gives its trials). The default was chosen
on all 34 tasks in that round, so on LCBench the report half is not unseen: said wherever the
figures are.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from split import read_split  # noqa: E402

CELLS = {
    "default": ({"kind": "mf_gp"}, {"kind": "wilcoxon"}),
    "tpe+none": ({"kind": "tpe"}, {"kind": "none"}),
    "tpe-uni-ce+wilcoxon-halving": (
        {"kind": "tpe", "multivariate": False, "consider_endpoints": True},
        {"kind": "wilcoxon_halving", "max_resource": 51},
    ),
}
COMMIT = "bac83cc"


def rows(folder: Path, seeds: int) -> list[dict]:
    out = []
    for task in read_split()["lcbench"]["report"]:
        for cell, (sampler, pruner) in CELLS.items():
            for seed in range(seeds):
                raw = json.loads((folder / cell / f"{task}-{seed}.json").read_text())
                trials = [[t["number"], t["state"], t["epochs"], t["value"]] for t in raw["trials"]]
                out.append(
                    {
                        "family": "lcbench",
                        "task": task,
                        "half": "report",
                        "cell": cell,
                        "seed": seed,
                        "budget": raw["budget_epochs"],
                        "fidelity": "epochs",
                        "commit": COMMIT,
                        "engine": raw.get("engine", "replay"),
                        "wall_s": round(raw["wall_s"], 2),
                        "trials": trials,
                        "sampler": {**sampler, "seed": seed},
                        "pruner": pruner,
                    }
                )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--out", type=Path, default=HERE / "results" / "lcbench-round6.jsonl.gz")
    p.add_argument("--verify", action="store_true", help="replay one imported tpe+none study")
    args = p.parse_args(argv)
    got = rows(args.folder, args.seeds)
    if args.verify:
        from suite import replay

        first = next(r for r in got if r["cell"] == "tpe+none")
        again = replay("lcbench", first["task"], "tpe+none", first["seed"], first["budget"])
        same = again["trials"] == first["trials"]
        print(
            f"tpe+none {first['task']} seed {first['seed']}: the suite's replay is the same: {same}"
        )
        if not same:
            return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out, "wt") as fh:
        for r in got:
            fh.write(json.dumps(r) + "\n")
    print(f"{len(got)} studies in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
