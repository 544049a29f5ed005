"""Entry points of benchmarks/gpu/gpu_check.py (copied next to its study files; trials import it
from there)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dvt_hpo.exceptions import TrialPruned


def exact_batch_size(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    """The largest batch size that fits, found exactly with the built-in trainer's probe."""
    import torch

    from dvt_hpo.batch.search import find_batch_size
    from dvt_hpo.train.builtin import make_fits
    from dvt_hpo.train.config import TrainerConfig
    from dvt_hpo.train.data import build_data

    cfg = TrainerConfig.from_dict(config["trainer"])
    data = build_data(cfg.data, cfg.seed)
    fits = make_fits(cfg, data.in_shape, data.num_classes, torch.device("cuda", 0))
    result = find_batch_size(
        fits, low=config["min"], high=config["max"], tolerance=0.0, use_memory=False
    )
    ctx.set_user_attrs(
        {
            "exact_size": result.size,
            "exact_probes": result.n_probes,
            "exact_s": round(result.seconds, 2),
        }
    )
    ctx.report(0, {"score": float(result.size)})
    return {"score": float(result.size)}


def collective_steps(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    """All-reduce each step on NCCL (gloo on the CPU), report, and stop when pruned."""
    import torch
    import torch.distributed as dist

    cuda = config["device"] == "cuda"
    if cuda:
        torch.cuda.set_device(ctx.local_rank)
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", ctx.local_rank) if cuda else torch.device("cpu")
    try:
        size = dist.get_world_size()
        ctx.set_user_attrs({"backend": dist.get_backend(), "world_size": size})
        for step in range(config["steps"]):
            value = torch.full((1,), float(ctx.rank + 1), device=device)
            dist.all_reduce(value)
            assert value.item() == size * (size + 1) / 2, value.item()
            pruned: TrialPruned | None = None
            try:
                ctx.report(step, {"score": 0.5})
            except TrialPruned as exc:
                pruned = exc
            # The chief's decision to every rank, so that no rank waits in the next reduce.
            stop = torch.full((1,), 1.0 if pruned else 0.0, device=device)
            dist.all_reduce(stop)
            if stop.item() > 0:
                if pruned is not None:
                    raise pruned
                return {"score": 0.5}
        return {"score": 0.5}
    finally:
        dist.destroy_process_group()


def _allocator(config: dict[str, Any]) -> tuple[int, Callable[[int], Any]]:
    """(bytes this trial may hold, allocate(nbytes) -> a block filled with 7s)."""
    if config["device"] == "cuda":
        import torch

        from dvt_hpo.devices.gpu_cap import allowed_bytes

        def allocate(n: int) -> Any:
            return torch.full((n,), 7, dtype=torch.uint8, device="cuda")

        return allowed_bytes(0), allocate

    def allocate_cpu(n: int) -> bytearray:
        return bytearray(b"\x07") * n

    # A share of trials.memory_limit, whose address space also holds the interpreter.
    return config["limit_bytes"] // 2, allocate_cpu


def memory_roles(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    """Trial 0 allocates until refused; trial 1 holds 80% of its share meanwhile; trial 2,
    started after trial 0 ended, allocates 90% of a share."""
    allowed, allocate = _allocator(config)
    marker = Path(config["marker"])
    role = config["roles"][ctx.trial_number]
    limit = config.get("limit_bytes", allowed)  # what refuses the hog
    ctx.set_user_attrs(
        {
            "role": role,
            "allowed_gib": round(allowed / 2**30, 3),
            "limit_gib": round(limit / 2**30, 3),
        }
    )
    if role == "hog":
        blocks: list[Any] = []
        try:
            while True:
                blocks.append(allocate(config["chunk_bytes"]))
        except BaseException:
            held = len(blocks) * config["chunk_bytes"]
            blocks.clear()  # room to record it (the process is at its limit)
            ctx.set_user_attrs({"held_gib": round(held / 2**30, 3)})
            marker.write_text("refused")
            raise
    if role == "neighbour":
        block = allocate(int(allowed * 0.8))
        ctx.report(0, {"score": 0.5})
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        ok = marker.exists() and bool(block[0] == 7) and bool(block[-1] == 7)
        ctx.set_user_attrs({"saw_refusal": marker.exists()})
        ctx.report(1, {"score": 1.0 if ok else 0.0})
        return {"score": 1.0 if ok else 0.0}
    if config["device"] == "cuda":
        import torch

        free = torch.cuda.mem_get_info(0)[0]
        ctx.set_user_attrs({"free_gib_at_start": round(free / 2**30, 3)})
    block = allocate(int(allowed * 0.9))
    ctx.report(0, {"score": 1.0})
    del block
    return {"score": 1.0}
