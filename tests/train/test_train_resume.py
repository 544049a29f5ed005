"""dvt_hpo.train.resume: which loaded states the built-in trainer takes, what a taken one says,
and a state captured, saved as ``ctx.save_state`` saves it, and restored into freshly built
parts continuing bit for bit (weights, EMA, optimizer, scheduler, every random stream). The
whole trainer killed and resumed by a real worker: tests/recovery/test_resume.py."""

from __future__ import annotations

import io
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from dvt_hpo.train.builtin import Ema
from dvt_hpo.train.config import EmaConfig
from dvt_hpo.train.resume import Resumed, capture, load, restore_modules, restore_random


class Ctx:
    """A trial context whose ``load_state`` returns ``state``."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def load_state(self) -> Any:
        return self.state


def saved(epoch: int = 2, **extra: Any) -> dict[str, Any]:
    return {
        "trainer": "dvt_hpo.train",
        "version": 1,
        "epoch": epoch,
        "optimizer_steps": 30,
        "metrics": {"loss": 0.5},
        "batch": {"data.batch_size": 64, "precision.accumulate_steps": 2},
        **extra,
    }


@pytest.mark.parametrize(
    "ctx",
    [
        object(),  # resume off: the context has no load_state
        Ctx(None),  # nothing saved yet
        Ctx([1, 2]),
        Ctx(saved(trainer="my.trainer")),  # another trainer's state in this trial's chain
        Ctx(saved(version=2)),
        Ctx({k: v for k, v in saved().items() if k != "version"}),
    ],
)
def test_a_state_not_of_this_trainer_starts_from_epoch_0(ctx: Any) -> None:
    assert load(ctx) is None


def test_a_loaded_state_says_where_the_trainer_continues() -> None:
    resumed = load(Ctx(saved(epoch=4, batch_attrs={"batch_size_found": 128})))
    assert resumed is not None
    assert (resumed.next_epoch, resumed.optimizer_steps) == (5, 30)
    assert resumed.batch == {"data.batch_size": 64, "precision.accumulate_steps": 2}
    assert resumed.batch_attrs == {"batch_size_found": 128}
    assert Resumed(saved(batch_attrs=None)).batch_attrs == {}  # saved before any search
    # Copies: the trainer's updates never change the state it loaded.
    resumed.metrics["loss"] = 9.0
    assert resumed.metrics == {"loss": 0.5}


@pytest.fixture(autouse=True)
def global_streams() -> Iterator[None]:
    """The tests seed Python's, numpy's and torch's global streams: the suite gets them back."""
    states = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    yield
    random.setstate(states[0])
    np.random.set_state(states[1])
    torch.set_rng_state(states[2])


@dataclass
class Parts:
    model: nn.Module
    ema: Ema | None
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: Any
    generator: torch.Generator

    def modules(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "ema": self.ema,
            "optimizer": self.optimizer,
            "scheduler": self.scheduler,
            "scaler": self.scaler,
        }


def build(seed: int, *, ema: bool = True, scheduler: bool = True) -> Parts:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5), nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return Parts(
        model,
        Ema(model, EmaConfig(enabled=True, decay=0.5)) if ema else None,
        optimizer,
        torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5) if scheduler else None,
        torch.amp.GradScaler("cpu", enabled=False),
        torch.Generator().manual_seed(seed),
    )


def step(parts: Parts, n: int) -> list[float]:
    """One training step and a draw from each random stream the trainer uses."""
    x = torch.randn(8, 3)
    loss = parts.model(x).square().mean()
    parts.optimizer.zero_grad()
    loss.backward()
    parts.optimizer.step()
    if parts.scheduler is not None:
        parts.scheduler.step()
    if parts.ema is not None:
        parts.ema.update(parts.model, n)
    shuffled = torch.randperm(10, generator=parts.generator)[0]
    return [loss.item(), random.random(), float(np.random.rand()), float(shuffled)]


def through_a_file(state: dict[str, Any]) -> dict[str, Any]:
    """The state as the next attempt loads it (ctx.save_state / ctx.load_state: torch.save)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def captured(parts: Parts, epoch: int) -> dict[str, Any]:
    return capture(
        epoch=epoch,
        optimizer_steps=3,
        metrics={"loss": 1.0},
        batch={"data.batch_size": 8},
        batch_attrs={},
        generator=parts.generator,
        **parts.modules(),
    )


def test_restored_parts_continue_bit_for_bit() -> None:
    first = build(0)
    random.seed(0)
    np.random.seed(0)
    for n in range(3):
        step(first, n)
    state = through_a_file(captured(first, epoch=2))
    expected = [step(first, n) for n in range(3, 6)]

    resumed = load(Ctx(state))
    assert resumed is not None and resumed.next_epoch == 3
    second = build(1)  # other weights and streams until restored
    random.seed(1)
    np.random.seed(1)
    restore_modules(resumed, **second.modules())
    restore_random(resumed, second.generator)
    assert [step(second, n) for n in range(3, 6)] == expected
    assert first.ema is not None and second.ema is not None
    for a, b in [(first.model, second.model), (first.ema.module, second.ema.module)]:
        assert same_tensors(a.state_dict(), b.state_dict())
    assert not same_tensors(first.model.state_dict(), first.ema.module.state_dict())
    assert first.scheduler.get_last_lr() == second.scheduler.get_last_lr() == [0.1 * 0.5**6]


def test_a_state_without_ema_or_scheduler_leaves_those_parts_as_built() -> None:
    plain = build(0, ema=False, scheduler=False)
    step(plain, 0)
    state = through_a_file(captured(plain, epoch=0))
    assert (state["ema"], state["scheduler"], state["rng"]["cuda"]) == (None, None, None)
    later = build(1)
    assert later.ema is not None
    ema_before = {k: v.clone() for k, v in later.ema.module.state_dict().items()}
    restore_modules(Resumed(state), **later.modules())
    assert same_tensors(later.ema.module.state_dict(), ema_before)
    assert later.scheduler.get_last_lr() == [0.1]  # as built: never stepped
    # The model and the optimizer's momentum are the saved ones.
    assert same_tensors(later.model.state_dict(), plain.model.state_dict())
    assert same_tensors(momentum(later.optimizer), momentum(plain.optimizer))


def momentum(optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    return {str(i): s["momentum_buffer"] for i, s in optimizer.state_dict()["state"].items()}


def same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
