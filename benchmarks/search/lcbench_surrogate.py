"""The YAHPO Gym LCBench surrogate, read with onnxruntime directly.

``yahpo-gym`` pins ``ConfigSpace==0.6.1`` and ``numpy<2`` (its setup requirements), which the
core's environment (torch, scikit-learn, numpy 2) does not satisfy; what it does for one
evaluation is small: integer-encode the task id with ``encoding.json``, put the continuous
hyperparameters in the model's column order, and run the ONNX model. This module does that, a
whole learning curve (every epoch of one config) in one batched call.

The data folder (``model.onnx``, ``config_space.json``, ``encoding.json``) ships with the
benchmarks, ``benchmarks/search/data/yahpo_lcbench`` (its licence and source in
``benchmarks/search/data/README.md``); where that folder is missing (a copy of this file
elsewhere), ``$LCBENCH_DATA``, else ``shared/data/yahpo_lcbench`` beside or above the checkout.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# yahpo_gym/benchmarks/lcbench.py: the model's outputs and its continuous inputs, in order.
Y_NAMES = (
    "time",
    "val_accuracy",
    "val_cross_entropy",
    "val_balanced_accuracy",
    "test_cross_entropy",
    "test_balanced_accuracy",
)
CONT_NAMES = (
    "epoch",
    "batch_size",
    "learning_rate",
    "momentum",
    "weight_decay",
    "num_layers",
    "max_units",
    "max_dropout",
)
HYPERPARAMETERS = CONT_NAMES[1:]
MAX_EPOCHS = 52


SHIPPED = Path(__file__).resolve().parent / "data" / "yahpo_lcbench"


def data_dir() -> Path:
    """The surrogate's folder: the one shipped beside this file, else ``$LCBENCH_DATA``, else
    the first ``shared/data/yahpo_lcbench`` found walking up from this file."""
    if (SHIPPED / "model.onnx").is_file():
        return SHIPPED
    env = os.environ.get("LCBENCH_DATA")
    if env:
        if not (Path(env) / "model.onnx").is_file():  # the tests skip on this, naming it
            raise FileNotFoundError(f"LCBENCH_DATA={env} holds no model.onnx (the surrogate)")
        return Path(env)
    here = Path(__file__).resolve().parent
    for folder in (here, *here.parents):
        candidate = folder / "shared" / "data" / "yahpo_lcbench"
        if (candidate / "model.onnx").is_file():
            return candidate
    raise FileNotFoundError(
        f"the LCBench surrogate (model.onnx) was not found in {SHIPPED}: restore that folder "
        "from the repository, or set LCBENCH_DATA to the folder holding model.onnx, "
        "config_space.json and encoding.json"
    )


@dataclass(frozen=True)
class Dimension:
    """One hyperparameter of the surrogate's search space (from ``config_space.json``)."""

    name: str
    kind: str  # "int" | "float"
    low: float
    high: float
    log: bool


class Surrogate:
    """One ONNX session (one thread) answering whole learning curves."""

    def __init__(self, folder: Path | None = None) -> None:
        import onnxruntime as ort

        folder = folder or data_dir()
        options = ort.SessionOptions()
        # One thread: trials run one per core, and ORT's thread pool would only contend.
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(folder / "model.onnx"), sess_options=options, providers=["CPUExecutionProvider"]
        )
        inputs = self.session.get_inputs()
        # yahpo_gym feeds (categorical, continuous) in the model's input order; the categorical
        # input is the integer one.
        ints = [i.name for i in inputs if "int" in i.type]
        self._cat_input = ints[0] if ints else inputs[0].name
        self._cont_input = next(i.name for i in inputs if i.name != self._cat_input)
        self._output = self.session.get_outputs()[0].name
        self.encoding: dict[str, int] = json.loads((folder / "encoding.json").read_text())[
            "OpenML_task_id"
        ]
        space = json.loads((folder / "config_space.json").read_text())
        self.tasks: tuple[str, ...] = ()
        dims: list[Dimension] = []
        for hp in space["hyperparameters"]:
            if hp["name"] == "OpenML_task_id":
                self.tasks = tuple(hp["choices"])
            elif hp["name"] in HYPERPARAMETERS:
                kind = "int" if hp["type"] == "uniform_int" else "float"
                dims.append(Dimension(hp["name"], kind, hp["lower"], hp["upper"], hp["log"]))
        self.dimensions = tuple(sorted(dims, key=lambda d: HYPERPARAMETERS.index(d.name)))

    def predict(self, task: str, configs: np.ndarray) -> dict[str, np.ndarray]:
        """The outputs for rows of ``configs`` (columns: :data:`CONT_NAMES`)."""
        rows = np.asarray(configs, dtype=np.float32).reshape(-1, len(CONT_NAMES))
        cat = np.full((rows.shape[0], 1), self.encoding[str(task)], dtype=np.int32)
        out = self.session.run([self._output], {self._cat_input: cat, self._cont_input: rows})[0]
        return {name: out[:, i] for i, name in enumerate(Y_NAMES)}

    def curve(
        self, task: str, config: Mapping[str, Any], epochs: int = MAX_EPOCHS
    ) -> dict[str, np.ndarray]:
        """Every output at epochs 1..``epochs`` of one config, in one call."""
        hp = [float(config[name]) for name in HYPERPARAMETERS]
        rows = np.array([[e, *hp] for e in range(1, epochs + 1)], dtype=np.float32)
        return self.predict(task, rows)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` configs drawn uniformly (log-uniformly where the space says so), as rows of
        :data:`HYPERPARAMETERS`."""
        cols = []
        for d in self.dimensions:
            if d.log:
                col = np.exp(rng.uniform(np.log(d.low), np.log(d.high), n))
            else:
                col = rng.uniform(d.low, d.high, n)
            if d.kind == "int":
                col = np.clip(np.round(col), d.low, d.high)
            cols.append(col)
        return np.stack(cols, axis=1)

    def final_values(
        self, task: str, hps: np.ndarray, metric: str, epoch: int = MAX_EPOCHS
    ) -> np.ndarray:
        """``metric`` at ``epoch`` (the last one by default) for rows of
        :data:`HYPERPARAMETERS`."""
        epochs = np.full((hps.shape[0], 1), epoch, dtype=np.float32)
        return self.predict(task, np.hstack([epochs, hps]))[metric]


def search_space(dims: Sequence[Dimension], prefix: str = "hp") -> list[dict[str, Any]]:
    """The study file's ``search_space`` for the surrogate's hyperparameters."""
    out = []
    for d in dims:
        low: float | int = int(d.low) if d.kind == "int" else float(d.low)
        high: float | int = int(d.high) if d.kind == "int" else float(d.high)
        out.append(
            {
                "name": d.name,
                "path": f"{prefix}.{d.name}",
                "kind": d.kind,
                "low": low,
                "high": high,
                "log": d.log,
            }
        )
    return out


__all__ = [
    "CONT_NAMES",
    "HYPERPARAMETERS",
    "MAX_EPOCHS",
    "Y_NAMES",
    "Dimension",
    "Surrogate",
    "data_dir",
    "search_space",
]
