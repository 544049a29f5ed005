"""Fixtures of the built-in trainer's tests: a fake trial context and small configs."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from dvt_hpo.exceptions import TrialPruned
from tests.conftest import merge_sections


@dataclass(frozen=True)
class FakeChoice:
    batch_size: int
    accumulate_steps: int = 1
    found: int = 0
    cache: str = "off"


class FakeCtx:
    """Records reports and user attrs; prunes at ``prune_at``; ``find_batch_size`` runs the real search when
    ``search`` is given (its keyword arguments), else returns None (batch_size.auto off)."""

    def __init__(
        self,
        *,
        search: dict[str, Any] | None = None,
        effective: int | None = None,
        prune_at: int | None = None,
        wrap_fits: Callable[[Callable[[int], Any]], Callable[[int], Any]] | None = None,
    ) -> None:
        self.reports: list[tuple[int, dict[str, float]]] = []
        self.search = search
        self.effective = effective
        self.prune_at = prune_at
        self.wrap_fits = wrap_fits
        self.search_calls: list[dict[str, Any]] = []
        self.search_result: Any = None
        self.user_attrs: dict[str, Any] = {}

    def report(self, step: int, metrics: dict[str, float]) -> None:
        self.reports.append((step, dict(metrics)))
        if self.prune_at is not None and step >= self.prune_at:
            raise TrialPruned(step)

    def set_user_attrs(self, attrs: dict[str, Any]) -> None:
        self.user_attrs.update(attrs)

    def find_batch_size(
        self,
        fits: Callable[[int], Any],
        *,
        device: str = "cpu",
        agree: Any = None,
        samples: int | None = None,
    ) -> FakeChoice | None:
        self.search_calls.append({"device": device, "agree": agree, "samples": samples})
        if self.search is None:
            return None
        from dvt_hpo.batch.search import find_batch_size

        if self.wrap_fits is not None:
            fits = self.wrap_fits(fits)
        result = find_batch_size(fits, **self.search)
        self.search_result = result
        found = result.size if agree is None else agree(result.size)
        if self.effective is None:
            return FakeChoice(found, 1, found)
        accumulate = math.ceil(self.effective / found)
        return FakeChoice(math.ceil(self.effective / accumulate), accumulate, found)


@pytest.fixture
def fake_ctx() -> type[FakeCtx]:
    return FakeCtx


def small_config(**sections: Any) -> dict[str, Any]:
    """A fast digits config (checkpointing off); sections are merged into the defaults."""
    doc: dict[str, Any] = {
        "epochs": 2,
        "model": {"builder": "cnn", "kwargs": {"width": 16}},
        "data": {"kind": "digits", "batch_size": 64},
        "optim": {"optim_args": {"lr": 3e-3}},
        "checkpoint": {"enable_checkpointing": False},
        "devices": {"device": "cpu"},
    }
    return merge_sections(doc, sections)


@pytest.fixture
def make_config() -> Callable[..., dict[str, Any]]:
    return small_config
