"""The batch-size probe of the deepvisiontools backend: real steps through its own loader.

``fits(n)`` builds the trial's model and optimizer the way deepvisiontools' Trainer does
(``TrainerConfig.from_yaml`` -> ``model_spec``, ``build_param_groups``, ``cfg.optim``), draws
real samples through a ``DeepVisionLoader`` of batch size ``n`` (its collation and the
dataset's augmentations; sampled with replacement, so sizes above the dataset's length could
be probed: the search is capped at the training set's size instead, see ``training.py``), runs 2 training steps (forward, loss, backward, optimizer step with its state
allocated) and 1 evaluation step, measured by :func:`dvt_hpo.batch.probe.measuring`.
Out-of-memory errors propagate to the search, which tells them from other errors
(``dvt_hpo.batch.search.is_out_of_memory``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from deepvisiontools.datasets import DeepVisionLoader
from deepvisiontools.train.trainer import build_param_groups
from torch.utils.data import RandomSampler

from dvt_hpo.batch import probe

STEPS = 2


def make_fits(
    load: Callable[[Any], Any], train_set: Any, device: torch.device
) -> Callable[[int], Any]:
    """``fits(n)`` for ``ctx.find_batch_size``; ``load(loader)`` returns a fresh TrainerConfig
    (whose model is built from the trial's ``model_spec``) for that loader."""
    cuda = device.type == "cuda"

    def steps(n: int) -> None:
        sampler = RandomSampler(train_set, replacement=True, num_samples=n * (STEPS + 1))
        loader = DeepVisionLoader(train_set, batch_size=n, sampler=sampler, shuffle=False)
        cfg = load(loader)
        model = cfg.build_model().to(device)
        optimizer = cfg.optim(build_param_groups(model, cfg))
        amp = bool(cfg.precision.amp) and cuda
        dtype = torch.bfloat16 if cfg.precision.amp_dtype == "bf16" else torch.float16
        batches = iter(loader)
        model.train()
        for _ in range(STEPS):
            batch = next(batches)
            with torch.autocast(device.type, enabled=amp, dtype=dtype):
                out = model.train_step(batch[0], batch[1])
                loss = out.globalloss()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            out = loss = None
        batch = next(batches)
        model.eval()
        with torch.no_grad(), torch.autocast(device.type, enabled=amp, dtype=dtype):
            out = model.eval_step(batch[0], batch[1])

    # The peak and the memory allowed around the steps, their frames freed on an error.
    return probe.measuring(steps, device)


__all__ = ["make_fits"]
