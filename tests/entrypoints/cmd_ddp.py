"""A torchrun-style script for the command-trainer tests: gloo process group, one all-reduce
per epoch, reports on every rank (only rank 0's count)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist

from dvt_hpo.report import report

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
for epoch in range(2):
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    # Rank 1 reports another value: the trial must record rank 0's.
    report(epoch, score=args.lr * (epoch + 1) + (100.0 if rank else 0.0), ranks_sum=total.item())
env = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR")}
Path(args.out, f"ddp-rank{rank}.json").write_text(json.dumps({"world": world, "env": env}))
dist.destroy_process_group()
