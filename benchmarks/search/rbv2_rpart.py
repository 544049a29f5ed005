"""YAHPO Gym ``rbv2_rpart``: decision trees (rpart) on OpenML tasks; 5 hyperparameters (one of
them categorical); the fidelity is the training-set fraction (``trainsize``), read as 10 "epochs"
(fractions 0.1, 0.2, .. 1.0, each one step of the curve and one unit of budget); ``repl`` fixed at
10; the objective is the accuracy (``acc``)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

import numpy as np
from family import REFERENCE_SAMPLES, Family, data_folder, numeric_sample
from yahpo_onnx import YahpoModel, trainsize_levels

HYPERPARAMETERS = ("cp", "maxdepth", "minbucket", "minsplit", "num.impute.selected.cpo")
STEPS = 10
REPL = 10


class Rbv2Rpart(Family):
    name = "rbv2_rpart"
    steps = STEPS
    fidelity = "trainsize levels read as epochs"

    @cached_property
    def model(self) -> YahpoModel:
        return YahpoModel(
            data_folder("yahpo_rbv2_rpart", "YAHPO_RBV2_RPART_DATA"),
            ("cp", "maxdepth", "minbucket", "minsplit", "trainsize", "repl"),
            ("task_id", "num.impute.selected.cpo"),
            ("acc", "bac", "auc", "brier", "f1", "logloss", "timetrain", "timepredict", "memory"),
        )

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(self.model.hyperparameters["task_id"]["choices"])

    def search_space(self) -> list[dict[str, Any]]:
        return self.model.space(HYPERPARAMETERS)

    def _rows(self, task: str, configs: list[Mapping[str, Any]], sizes: np.ndarray) -> list[dict]:
        return [
            {**c, "task_id": task, "trainsize": float(s), "repl": REPL}
            for c in configs
            for s in sizes
        ]

    def curve(self, task: str, params: Mapping[str, Any]) -> np.ndarray:
        sizes = trainsize_levels(STEPS)
        return self.model.predict(self._rows(task, [params], sizes))["acc"].astype(float)

    def random_finals(self, task: str) -> np.ndarray:
        rng = np.random.default_rng(12345)
        configs = numeric_sample(self.search_space(), REFERENCE_SAMPLES, rng)
        return self.model.predict(self._rows(task, configs, np.array([1.0])))["acc"].astype(float)
