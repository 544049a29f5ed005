"""Run under torchrun by test_train_ddp.py: the built-in trainer with a file-backed fake ctx.

Usage: ddp_script.py CONFIG_JSON OUT_DIR [PRUNE_AT]. Each rank writes OUT_DIR/rank{R}.json with
what its ctx saw (reports, the agreed batch size) and what ``run`` returned or raised.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dvt_hpo.exceptions import TrialPruned
from dvt_hpo.train import run


@dataclass(frozen=True)
class Choice:
    batch_size: int
    accumulate_steps: int = 1
    cache: str = "off"


class FileCtx:
    def __init__(self, rank: int, prune_at: int | None) -> None:
        self.rank = rank
        self.prune_at = prune_at
        self.reports: list[list[Any]] = []
        self.agreed: int | None = None
        self.probe: Any = None

    def report(self, step: int, metrics: dict[str, float]) -> None:
        self.reports.append([step, metrics])
        if self.prune_at is not None and step >= self.prune_at:
            raise TrialPruned(step)

    def find_batch_size(
        self, fits: Any, *, device: str = "cpu", agree: Any = None, samples: int | None = None
    ) -> Choice:
        self.samples = samples  # each rank's share of the training set
        self.probe = fits(8)
        # Ranks "find" different sizes; agree() must give every rank the smallest.
        self.agreed = agree(16 + 8 * self.rank)
        return Choice(self.agreed)


def main() -> None:
    config = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    prune_at = int(sys.argv[3]) if len(sys.argv) > 3 else None
    rank = int(os.environ["RANK"])
    ctx = FileCtx(rank, prune_at)
    record: dict[str, Any] = {"world_size": int(os.environ["WORLD_SIZE"])}
    try:
        record["result"] = run(config, ctx)
    except TrialPruned as exc:
        record["pruned"] = exc.step
    record.update(reports=ctx.reports, agreed=ctx.agreed, probe=ctx.probe)
    tmp = out / f".rank{rank}.json.tmp"
    tmp.write_text(json.dumps(record))
    tmp.replace(out / f"rank{rank}.json")


if __name__ == "__main__":
    main()
