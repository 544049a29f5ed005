"""The built-in trainer's own learning curves (``dvt_hpo.train``: small CNNs and MLPs on
scikit-learn's bundled digits), recorded once as a table by ``record_digits.py`` and replayed by
nearest-config lookup: a trial's curve is the recorded curve of the closest recorded config with
the same optimizer (each dimension scaled to [0, 1], log-scaled where the space is; a categorical
by its choice's rank). The search is then over a finite set of real trainings, as on any tabular
benchmark.

The space is conditional (``momentum`` only when the optimizer is SGD), like the quickstart's
with a few more dimensions; each step is one epoch, and the objective the validation macro-F1.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from family import HERE, Family
from result_files import read_rows

EPOCHS = 10
TABLE = HERE / "data" / "builtin_digits" / "curves.jsonl.gz"
HOLDOUT_TABLE = HERE / "data" / "builtin_digits" / "holdout.jsonl.gz"
SGD = "torch.optim.SGD"
# Task: the trainer config's model and data (a quarter of the data: curves that cross later);
# ``depth`` 2 where not said.
TASKS: dict[str, dict[str, Any]] = {
    "digits-mlp": {"builder": "mlp", "max_samples": None},
    "digits-cnn": {"builder": "cnn", "max_samples": None},
    "digits500-mlp": {"builder": "mlp", "max_samples": 500},
    "digits500-cnn": {"builder": "cnn", "max_samples": 500},
}
# A second set of tasks, recorded after round 12 into a table of their own and kept whole for
# reporting (the family ``builtin_digits_holdout``, no selection half): no choice of a default
# saw them. Chosen for spread before any was recorded: less data (curves that cross most), more
# data, a deeper MLP and CNN, each model on little data and on more.
HOLDOUT_TASKS: dict[str, dict[str, Any]] = {
    "digits250-mlp": {"builder": "mlp", "max_samples": 250},
    "digits1000-mlp": {"builder": "mlp", "max_samples": 1000},
    "digits-mlp3": {"builder": "mlp", "max_samples": None, "depth": 3},
    "digits250-cnn": {"builder": "cnn", "max_samples": 250},
    "digits1000-cnn": {"builder": "cnn", "max_samples": 1000},
    "digits500-cnn3": {"builder": "cnn", "max_samples": 500, "depth": 3},
}
ALL_TASKS = {**TASKS, **HOLDOUT_TASKS}
SPACE: list[dict[str, Any]] = [
    {"name": "lr", "path": "hp.lr", "kind": "float", "low": 1.0e-4, "high": 0.3, "log": True},
    {"name": "width", "path": "hp.width", "kind": "categorical", "choices": [8, 16, 32]},
    {"name": "dropout", "path": "hp.dropout", "kind": "float", "low": 0.0, "high": 0.5},
    {
        "name": "weight_decay",
        "path": "hp.weight_decay",
        "kind": "float",
        "low": 1.0e-6,
        "high": 1.0e-2,
        "log": True,
    },
    {
        "name": "batch_size",
        "path": "hp.batch_size",
        "kind": "categorical",
        "choices": [16, 32, 64, 128],
    },
    {
        "name": "optimizer",
        "path": "hp.optimizer",
        "kind": "categorical",
        "choices": ["torch.optim.AdamW", SGD],
    },
    {
        "name": "momentum",
        "path": "hp.momentum",
        "kind": "float",
        "low": 0.0,
        "high": 0.99,
        "when": {"optimizer": SGD},
    },
]


def trainer_config(task: str, params: Mapping[str, Any], output_dir: str) -> dict[str, Any]:
    """The built-in trainer's config of one recorded training."""
    spec = ALL_TASKS[task]
    optim_args: dict[str, Any] = {"lr": float(params["lr"])}
    if params["optimizer"] == SGD:
        optim_args["momentum"] = float(params["momentum"])
    return {
        "epochs": EPOCHS,
        "seed": 0,
        "output_dir": output_dir,
        "model": {
            "builder": spec["builder"],
            "kwargs": {
                "width": int(params["width"]),
                "depth": int(spec.get("depth", 2)),
                "dropout": float(params["dropout"]),
            },
        },
        "data": {
            "kind": "digits",
            "batch_size": int(params["batch_size"]),
            "val_fraction": 0.2,
            **({"max_samples": spec["max_samples"]} if spec["max_samples"] else {}),
        },
        "optim": {
            "target": params["optimizer"],
            "optim_args": optim_args,
            "weight_decay": float(params["weight_decay"]),
        },
        "checkpoint": {"enable_checkpointing": False},
    }


def read_table(
    path: Path = TABLE, tasks: Mapping[str, Any] = TASKS
) -> dict[str, list[tuple[dict[str, Any], list[float]]]]:
    """Per task of ``tasks``, the recorded (params, macro-F1 per epoch); a last line cut short
    is skipped."""
    out: dict[str, list[tuple[dict[str, Any], list[float]]]] = {t: [] for t in tasks}
    for row in read_rows(path):
        if row.get("task") in out and len(row["curve"]) == EPOCHS:
            out[row["task"]].append((row["params"], row["curve"]))
    return out


def _encode(params: Mapping[str, Any]) -> np.ndarray:
    """[0, 1] coordinates of the numeric dimensions and the categoricals' ranks (the optimizer
    is matched exactly, not encoded)."""
    x = []
    for d in SPACE:
        name = d["name"]
        if name == "optimizer":
            continue
        if "choices" in d:
            x.append(d["choices"].index(params[name]) / (len(d["choices"]) - 1))
        elif name == "momentum":
            x.append(
                float(params.get(name, 0.0)) / d["high"] if params["optimizer"] == SGD else 0.0
            )
        elif d.get("log"):
            lo, hi = np.log(d["low"]), np.log(d["high"])
            x.append((np.log(float(params[name])) - lo) / (hi - lo))
        else:
            x.append((float(params[name]) - d["low"]) / (d["high"] - d["low"]))
    return np.array(x)


# The table's first configs per task as rounds 7 and 8 read it (the table then held these): the
# family ``builtin_digits``, so that their kept grids replay and normalise as they ran.
ROUND_8_CONFIGS: dict[str, int] = {
    "digits-mlp": 54,
    "digits-cnn": 54,
    "digits500-mlp": 53,
    "digits500-cnn": 53,
}


class BuiltinDigits(Family):
    """``configs``: the first configs of each task the family reads (the recorder appends a
    task's configs in their order, so the first N lines of a task are its configs 0 to N-1).
    ``holdout``: the held-out tasks and their table instead (all their configs)."""

    steps = EPOCHS
    fidelity = "epochs"
    conditional = True

    def __init__(
        self, path: Path | None = None, configs: int | None = None, holdout: bool = False
    ) -> None:
        self.path = path or (HOLDOUT_TABLE if holdout else TABLE)
        self.configs = configs
        self.holdout = holdout
        self.task_specs = HOLDOUT_TASKS if holdout else TASKS
        if holdout:
            self.name = "builtin_digits_holdout"
        else:
            self.name = "builtin_digits" if configs is None else f"builtin_digits_{configs}"

    @cached_property
    def table(self) -> dict[str, list[tuple[dict[str, Any], list[float]]]]:
        rows = read_table(self.path, self.task_specs)
        if self.configs is None and not self.holdout:
            return {task: kept[: ROUND_8_CONFIGS[task]] for task, kept in rows.items()}
        return {task: kept[: self.configs] for task, kept in rows.items()}

    @cached_property
    def _index(self) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
        out = {}
        for task, rows in self.table.items():
            for opt in ("torch.optim.AdamW", SGD):
                mine = [(p, c) for p, c in rows if p["optimizer"] == opt]
                if mine:
                    out[(task, opt)] = (
                        np.stack([_encode(p) for p, _ in mine]),
                        np.array([c for _, c in mine]),
                    )
        return out

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(self.task_specs)

    def search_space(self) -> list[dict[str, Any]]:
        return [dict(d) for d in SPACE]

    def trainer_defaults(self) -> dict[str, Any]:
        return {**super().trainer_defaults(), "momentum": 0.9}

    def curve(self, task: str, params: Mapping[str, Any]) -> np.ndarray:
        if (task, params["optimizer"]) not in self._index:
            raise FileNotFoundError(
                f"no recorded curve of {task} with {params['optimizer']} in {self.path}: run "
                "benchmarks/search/record_digits.py" + (" --holdout" if self.holdout else "")
            )
        xs, curves = self._index[(task, params["optimizer"])]
        i = int(np.argmin(((xs - _encode(params)) ** 2).sum(axis=1)))
        return curves[i]

    def random_finals(self, task: str) -> np.ndarray:
        # The recorded configs are random draws of the space.
        return np.array([c[-1] for _, c in self.table[task]])
