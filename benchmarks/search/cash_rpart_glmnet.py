"""A learner choice over two YAHPO surrogates on the same OpenML tasks: ``learner`` is ``rpart``
(``rbv2_rpart``'s 5 hyperparameters) or ``glmnet`` (``iaml_glmnet``'s 2), each branch's
hyperparameters conditional on it (``when: {learner: ...}``), as in YAHPO's own learner-choice
scenarios (``iaml_super``, ``rbv2_super``). The tasks are ``iaml_glmnet``'s 4, which
``rbv2_rpart`` has too; the fidelity is the two surrogates' (10 trainsize levels read as epochs);
the objective is the accuracy of the chosen learner. The two surrogates were fitted on different
benchmark runs, so each branch's accuracy is its own suite's measurement of the same task: a
search problem with a realistic conditional structure, not a statement about the learners.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any

import numpy as np
from family import Family
from iaml_glmnet import IamlGlmnet
from rbv2_rpart import Rbv2Rpart

STEPS = 10
LEARNERS = ("rpart", "glmnet")


class CashRpartGlmnet(Family):
    name = "cash_rpart_glmnet"
    steps = STEPS
    fidelity = "trainsize levels read as epochs"
    conditional = True

    @cached_property
    def learners(self) -> dict[str, Family]:
        return {"rpart": Rbv2Rpart(), "glmnet": IamlGlmnet()}

    @property
    def tasks(self) -> tuple[str, ...]:
        return self.learners["glmnet"].tasks

    def search_space(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [
            {
                "name": "learner",
                "path": "hp.learner",
                "kind": "categorical",
                "choices": list(LEARNERS),
            }
        ]
        for learner, family in self.learners.items():
            out += [{**d, "when": {"learner": learner}} for d in family.search_space()]
        return out

    def _branch(self, params: Mapping[str, Any]) -> tuple[Family, dict[str, Any]]:
        family = self.learners[params["learner"]]
        return family, {d["name"]: params[d["name"]] for d in family.search_space()}

    def curve(self, task: str, params: Mapping[str, Any]) -> np.ndarray:
        family, own = self._branch(params)
        return family.curve(task, own)

    def random_finals(self, task: str) -> np.ndarray:
        # A random config picks either learner as often: both branches' random finals.
        return np.concatenate([f.random_finals(task) for f in self.learners.values()])
