"""A YAHPO Gym surrogate (ONNX model, ``config_space.json``, ``encoding.json``) read with
onnxruntime directly, as ``yahpo-gym`` 1.0 feeds it: the categorical inputs integer-encoded by
``encoding.json`` in the scenario's ``cat_names`` order, the continuous ones as given in its
``cont_names`` order, one ONNX call per learning curve.

``yahpo-gym`` itself pins ``numpy<2`` and ``ConfigSpace==0.6.1``, which the project's environment
does not satisfy; the encoding is small enough to do here (the scenario's names are those of
``yahpo_gym/benchmarks/``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


class YahpoModel:
    """One scenario's ONNX session on one thread."""

    def __init__(
        self,
        folder: Path,
        cont_names: Sequence[str],
        cat_names: Sequence[str],
        y_names: Sequence[str],
    ) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(folder / "model.onnx"), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.cont_names, self.cat_names, self.y_names = (
            tuple(cont_names),
            tuple(cat_names),
            tuple(y_names),
        )
        self.encoding: dict[str, dict[str, int]] = json.loads(
            (folder / "encoding.json").read_text()
        )
        self.config_space: dict[str, Any] = json.loads((folder / "config_space.json").read_text())
        self.hyperparameters = {hp["name"]: hp for hp in self.config_space["hyperparameters"]}

    def predict(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
        """Every output for each row (a dict of the scenario's inputs)."""
        cont = np.array(
            [[float(_get(r, n)) for n in self.cont_names] for r in rows], dtype=np.float32
        )
        cat = np.array(
            [[self.encoding[n][str(_get(r, n))] for n in self.cat_names] for r in rows],
            dtype=np.int32,
        )
        out = self.session.run(None, {"x_cat": cat, "x_cont": cont})[0]
        return {name: out[:, i] for i, name in enumerate(self.y_names)}

    def space(self, names: Sequence[str]) -> list[dict[str, Any]]:
        """The study file's dimensions for ``names`` (paths under ``hp.``), from the
        scenario's config space; a dot in a name becomes ``_`` (a path's separator)."""
        out = []
        for yahpo_name in names:
            hp = self.hyperparameters[yahpo_name]
            name = param_name(yahpo_name)
            if hp["type"] == "categorical":
                out.append(
                    {
                        "name": name,
                        "path": f"hp.{name}",
                        "kind": "categorical",
                        "choices": list(hp["choices"]),
                    }
                )
                continue
            kind = "int" if hp["type"] == "uniform_int" else "float"
            cast = int if kind == "int" else float
            dim: dict[str, Any] = {
                "name": name,
                "path": f"hp.{name}",
                "kind": kind,
                "low": cast(hp["lower"]),
                "high": cast(hp["upper"]),
            }
            if hp.get("log"):
                dim["log"] = True
            out.append(dim)
        return out


def param_name(yahpo_name: str) -> str:
    """The study's name of a scenario's input (``num.impute.selected.cpo`` is
    ``num_impute_selected_cpo``)."""
    return yahpo_name.replace(".", "_")


def _get(row: Mapping[str, Any], name: str) -> Any:
    return row[name] if name in row else row[param_name(name)]


def trainsize_levels(n: int) -> np.ndarray:
    """The fidelity of a ``trainsize`` surrogate read as ``n`` steps: fractions 1/n .. 1."""
    return np.linspace(1.0 / n, 1.0, n)
