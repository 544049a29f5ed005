"""What every family of the search suite answers, whatever stands behind it (a surrogate model,
a recorded table): its tasks, its search space as a study file writes it, and the learning curve
of one config on one task.

A family's *steps* are what a trial reports and what the budget counts: epochs for LCBench and
the built-in trainer's table; for YAHPO's ``rbv2_*`` and ``iaml_*`` surrogates, increasing
training-set fractions (``trainsize`` levels) read as epochs. The objective is always maximized.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
# Reference values (y*, y_med) from this many random configs of a surrogate family.
REFERENCE_SAMPLES = 5_000


def data_folder(name: str, env: str) -> Path:
    """The folder ``name`` (e.g. ``yahpo_rbv2_rpart``): ``benchmarks/search/data/<name>`` when
    the project ships it, else ``$<env>``, else ``shared/data/<name>`` beside or above the
    checkout."""
    shipped = HERE / "data" / name
    if shipped.is_dir() and any(shipped.iterdir()):
        return shipped
    from os import environ

    if environ.get(env):
        return Path(environ[env])
    for folder in (HERE, *HERE.parents):
        candidate = folder / "shared" / "data" / name
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"the benchmark data {name!r} was not found in benchmarks/search/data/{name}: set {env} "
        "to its folder"
    )


class Family(ABC):
    """One family of search problems."""

    name: str
    steps: int  # reports of a full training
    fidelity: str  # how a step is read: "epochs", or "trainsize levels read as epochs"
    conditional: bool = False

    @property
    @abstractmethod
    def tasks(self) -> tuple[str, ...]: ...

    @abstractmethod
    def search_space(self) -> list[dict[str, Any]]:
        """The study file's ``search_space`` (paths under ``hp.``)."""

    def trainer_defaults(self) -> dict[str, Any]:
        """``trainer.config.hp``: a value for every dimension (a ``when:`` needs one)."""
        out: dict[str, Any] = {}
        for dim in self.search_space():
            if "choices" in dim:
                out[dim["name"]] = dim["choices"][0]
            else:
                out[dim["name"]] = dim["low"]
        return out

    @abstractmethod
    def curve(self, task: str, params: Mapping[str, Any]) -> np.ndarray:
        """The objective after each of the ``steps`` steps of ``params`` on ``task``."""

    @abstractmethod
    def random_finals(self, task: str) -> np.ndarray:
        """Final values of many random configs: the reference of the regret."""

    def reference(self, task: str) -> tuple[float, float]:
        """(y*, y_med): the best and the median final value of random configs."""
        if task not in self._references:
            finals = self.random_finals(task)
            self._references[task] = (float(np.max(finals)), float(np.median(finals)))
        return self._references[task]

    @cached_property
    def _references(self) -> dict[str, tuple[float, float]]:
        return {}


def numeric_sample(space: list[dict[str, Any]], n: int, rng: np.random.Generator) -> list[dict]:
    """``n`` random configs of an unconditional space (log-uniform where it says so)."""
    cols: dict[str, np.ndarray] = {}
    for d in space:
        if "choices" in d:
            cols[d["name"]] = rng.choice(np.array(d["choices"], dtype=object), n)
            continue
        low, high = float(d["low"]), float(d["high"])
        if d.get("log"):
            col = np.exp(rng.uniform(np.log(low), np.log(high), n))
        else:
            col = rng.uniform(low, high, n)
        if d["kind"] == "int":
            col = np.clip(np.round(col), low, high)
        cols[d["name"]] = col
    return [{k: v[i] for k, v in cols.items()} for i in range(n)]
