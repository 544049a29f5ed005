"""YAHPO Gym LCBench (``benchmarks/lcbench_surrogate.py``): an MLP on 34 OpenML tasks, 7
hyperparameters, 52 epochs; the objective is the validation accuracy."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from functools import cached_property
from typing import Any

import numpy as np
from family import HERE, REFERENCE_SAMPLES, Family

sys.path.insert(1, str(HERE.parent))
import lcbench_surrogate  # noqa: E402


class Lcbench(Family):
    """``steps`` below 52: the first ``steps`` epochs of every curve as a study of that many
    epochs, its value the accuracy after the last of them (a cut of a 52-epoch training, not a
    shorter training: its curve has not flattened at the cut)."""

    fidelity = "epochs"

    def __init__(self, steps: int = lcbench_surrogate.MAX_EPOCHS) -> None:
        self.steps = steps
        self.name = "lcbench" if steps == lcbench_surrogate.MAX_EPOCHS else f"lcbench_e{steps}"

    @cached_property
    def surrogate(self) -> lcbench_surrogate.Surrogate:
        return lcbench_surrogate.Surrogate()

    @property
    def tasks(self) -> tuple[str, ...]:
        return self.surrogate.tasks

    def search_space(self) -> list[dict[str, Any]]:
        return lcbench_surrogate.search_space(self.surrogate.dimensions)

    def curve(self, task: str, params: Mapping[str, Any]) -> np.ndarray:
        return self.surrogate.curve(task, params, self.steps)["val_accuracy"].astype(float)

    def random_finals(self, task: str) -> np.ndarray:
        rng = np.random.default_rng(12345)
        hps = self.surrogate.sample(REFERENCE_SAMPLES, rng)
        return self.surrogate.final_values(task, hps, "val_accuracy", self.steps).astype(float)
