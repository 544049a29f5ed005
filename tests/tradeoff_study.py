"""A real study with several objectives on the trade-off toy (``tests/entrypoints/tradeoff``),
run with ``dvt-hpo run``: the grid sampler tries every ``x`` once, so its values are known.

``x`` in {0.2, 0.4, 0.6, 0.8} gives ``score = x`` and ``cost = 10 x + 2`` at the last epoch,
``cost = 10 x`` at the first, and ``size = 1000 x``: with ``size <= 500`` the trials of 0.6
and 0.8 are infeasible, and the front of score (max) and cost (min) is x = 0.2 and 0.4.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import yaml

from dvt_hpo.cli import EXIT_OK, main
from tests.conftest import toy_study

CHOICES = [0.2, 0.4, 0.6, 0.8]
TWO_OBJECTIVES: dict[str, Any] = {
    "metrics": [
        {"name": "score", "direction": "maximize"},
        {"name": "cost", "direction": "minimize"},
    ],
    "constraints": [{"metric": "size", "max": 500}],
}


def tradeoff_doc(
    name: str, objective: dict[str, Any] | None = None, choices: list[float] | None = None
) -> dict[str, Any]:
    choices = choices or CHOICES
    doc = toy_study(
        name,
        trainer={"entrypoint": "tests.entrypoints.tradeoff:run", "config": {"x": 0.5, "epochs": 3}},
        search_space=[{"name": "x", "path": "x", "kind": "categorical", "choices": choices}],
    )
    doc["study"]["n_trials"] = len(choices)
    doc["study"]["sampler"] = {"kind": "grid"}
    objective = TWO_OBJECTIVES if objective is None else objective
    if len(objective.get("metrics", ())) > 1:
        del doc["study"]["pruner"]  # the default: none
    doc["objective"] = objective
    return doc


def run_tradeoff(folder: Path, doc: dict[str, Any], code: int = EXIT_OK) -> tuple[Path, str]:
    """Write ``folder/study.yaml`` and run it to the end (exit ``code``); returns (path, the
    run's output)."""
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exit_code = main(["run", str(path)])
    assert exit_code == code, out.getvalue()
    return path, out.getvalue()
