"""YAHPO Gym ``iaml_glmnet``: elastic net (glmnet) on 4 OpenML tasks; 2 hyperparameters (``alpha``,
``s`` on a log scale); the fidelity is the training-set fraction (``trainsize``), read as 10
"epochs" (fractions 0.1 .. 1.0, each one step and one unit of budget); the objective is the
accuracy, 1 - ``mmce``."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

import numpy as np
from family import REFERENCE_SAMPLES, Family, data_folder, numeric_sample
from yahpo_onnx import YahpoModel, trainsize_levels

STEPS = 10
Y_NAMES = (
    "mmce",
    "f1",
    "auc",
    "logloss",
    "ramtrain",
    "rammodel",
    "rampredict",
    "timetrain",
    "timepredict",
    "mec",
    "ias",
    "nf",
)


class IamlGlmnet(Family):
    name = "iaml_glmnet"
    steps = STEPS
    fidelity = "trainsize levels read as epochs"

    @cached_property
    def model(self) -> YahpoModel:
        return YahpoModel(
            data_folder("yahpo_iaml_glmnet", "YAHPO_IAML_GLMNET_DATA"),
            ("alpha", "s", "trainsize"),
            ("task_id",),
            Y_NAMES,
        )

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(self.model.hyperparameters["task_id"]["choices"])

    def search_space(self) -> list[dict[str, Any]]:
        return self.model.space(("alpha", "s"))

    def _accuracy(
        self, task: str, configs: list[Mapping[str, Any]], sizes: np.ndarray
    ) -> np.ndarray:
        rows = [{**c, "task_id": task, "trainsize": float(s)} for c in configs for s in sizes]
        return 1.0 - self.model.predict(rows)["mmce"].astype(float)

    def curve(self, task: str, params: Mapping[str, Any]) -> np.ndarray:
        return self._accuracy(task, [params], trainsize_levels(STEPS))

    def random_finals(self, task: str) -> np.ndarray:
        rng = np.random.default_rng(12345)
        configs = numeric_sample(self.search_space(), REFERENCE_SAMPLES, rng)
        return self._accuracy(task, configs, np.array([1.0]))
