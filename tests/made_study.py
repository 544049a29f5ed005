"""A study written directly with Optuna, shaped like the runner's: the user attrs it sets
(host, batch size, duration, per-epoch history of every metric, reason and stderr on failure),
complete, pruned, failed and running trials. For the commands that only read a study."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import yaml

from dvt_hpo.studyfile import StudySpec, load_spec
from tests.conftest import toy_study

SPACE = [
    {"name": "lr", "path": "lr", "kind": "float", "low": 1e-4, "high": 1e-1, "log": True},
    {"name": "width", "path": "width", "kind": "categorical", "choices": [16, 32, 64]},
]


def _history(curve: list[float]) -> dict[str, Any]:
    return {
        "score": [[step, v] for step, v in enumerate(curve)],
        "loss": [[step, 1.0 - v] for step, v in enumerate(curve)],
    }


def _trial(study: optuna.Study, curve: list[float], host: str) -> optuna.trial.Trial:
    trial = study.ask()
    trial.suggest_float("lr", 1e-4, 1e-1, log=True)
    trial.suggest_categorical("width", [16, 32, 64])
    for step, value in enumerate(curve):
        trial.report(value, step)
    attrs = {
        "host": host,
        "log_dir": f"/runs/trial-{trial.number:04d}",
        "batch_size": 256,
        "batch_size_probes": 5,
        "epochs_reported": len(curve),
        "last_step": len(curve) - 1,
        "history": _history(curve),
        "duration_s": 3.5,
    }
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    return trial


def make_study(folder: Path, name: str = "seeing", *, running: bool = True) -> StudySpec:
    """Write ``folder/study.yaml`` and fill its SQLite study: 4 complete, 1 pruned, 1 failed
    and (``running``) 1 running trial. Returns the loaded spec."""
    path = folder / "study.yaml"
    doc = toy_study(name, search_space=SPACE)
    doc["study"]["n_trials"] = 10
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    spec = load_spec(path)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name=name, storage=spec.study.storage, direction="maximize")
    for i, top in enumerate((0.52, 0.81, 0.64, 0.93)):
        trial = _trial(study, [top / 3, top / 2, top], host=f"gpu-{i % 2}")
        trial.set_user_attr("status", "ok")
        study.tell(trial, top)
    pruned = _trial(study, [0.05, 0.06], host="gpu-0")
    pruned.set_user_attr("status", "pruned")
    study.tell(pruned, state=optuna.trial.TrialState.PRUNED)
    failed = _trial(study, [0.1], host="gpu-1")
    failed.set_user_attr("reason", "OutOfMemoryError: CUDA out of memory at batch 512")
    failed.set_user_attr("stderr_tail", "Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory")
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    if running:
        _trial(study, [0.2, 0.4], host="gpu-1")
    return spec
