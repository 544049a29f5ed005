"""dvt_hpo.batch.probe: the fits(n) made of a trainer's steps (on CPU: no figures needed)."""

from __future__ import annotations

import weakref

import pytest
import torch

from dvt_hpo.batch import probe


class Held:
    """Stands for a tensor a probe's steps hold."""


def test_steps_that_ran_fit_on_cpu() -> None:
    seen: list[int] = []
    fits = probe.measuring(seen.append, torch.device("cpu"))
    assert fits(8) is True and fits(16) is True
    assert seen == [8, 16]


def test_an_error_propagates_with_what_the_steps_held_already_freed() -> None:
    refs: list[weakref.ref[Held]] = []

    def steps(n: int) -> None:
        held = Held()
        refs.append(weakref.ref(held))
        raise RuntimeError(f"CUDA out of memory at {n}")

    fits = probe.measuring(steps, torch.device("cpu"))
    with pytest.raises(RuntimeError, match="out of memory at 4") as info:
        fits(4)
    # The exception (and its traceback) is still alive here; the steps' locals are not.
    assert info.value.__traceback__ is not None
    assert refs[0]() is None


def test_a_stop_while_probing_is_not_swallowed() -> None:
    def steps(n: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        probe.measuring(steps, torch.device("cpu"))(2)
