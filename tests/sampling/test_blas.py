"""A seeded default study samples the same trials whatever the BLAS thread count: through
``dvt-hpo run`` with 1 and with 4 threads, and replayed in one process as the search
benchmarks replay it; and the sampler's linear algebra runs on one thread."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import yaml
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from dvt_hpo.sampling import mf_gp
from dvt_hpo.sampling.mf_gp import MultiFidelityGPSampler
from tests.conftest import REPO_ROOT, run_dvt_hpo

# Trials past the model's 10 random ones, enough for matrices of over 150 points, where
# OpenBLAS's results depend on its thread count.
N_TRIALS = 40


def _study_file(folder: Path) -> Path:
    folder.mkdir()
    doc = {
        "study": {
            "name": "threads",
            "storage": "sqlite:///study.db",
            "n_trials": N_TRIALS,
            "sampler": {"seed": 0},  # the default sampler and pruner, seeded
        },
        "objective": {"metric": "score", "direction": "maximize", "reduce": "last"},
        "trials": {"keep_logs": "none"},
        "trainer": {
            "entrypoint": "tests.entrypoints.curves:run",
            "config": {"epochs": 27, "lr": 0.01, "drop": 0.0, "width": 16},
        },
        "search_space": [
            {"name": "lr", "path": "lr", "kind": "float", "low": 1e-4, "high": 0.1, "log": True},
            {"name": "drop", "path": "drop", "kind": "float", "low": 0.0, "high": 0.5},
            {"name": "width", "path": "width", "kind": "categorical", "choices": [16, 32, 64]},
        ],
    }
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    return env


Row = tuple[int, str, dict[str, Any], dict[int, float], float | None]


def _rows(study: optuna.Study) -> list[Row]:
    return [
        (t.number, t.state.name, t.params, t.intermediate_values, t.value)
        for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    ]


def _run(path: Path, threads: int) -> list[Row]:
    done = run_dvt_hpo("run", path, cwd=path.parent, env=_env(threads))
    assert done.returncode == 0, done.stderr
    storage = f"sqlite:///{path.parent / 'study.db'}"
    return _rows(optuna.load_study(study_name="threads", storage=storage))


# The study replayed in one process, as benchmarks/search/search_replay.py replays the search
# benchmark's studies: the loader's sampler and pruner, seeded as a fresh run seeds them.
_REPLAY = """
import json, sys, warnings
import optuna
from dvt_hpo.sampling import space
from dvt_hpo.sampling.optuna_factory import build_pruner
from dvt_hpo.study.setup import reseeded_sampler
from dvt_hpo.studyfile import load_spec
from tests.entrypoints import curves

class Ctx:
    def __init__(self, trial):
        self.trial = trial
    def report(self, step, metrics):
        self.trial.report(metrics["score"], step)
        if self.trial.should_prune():
            raise optuna.TrialPruned()

optuna.logging.set_verbosity(optuna.logging.WARNING)
spec = load_spec(sys.argv[1])
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    study = optuna.create_study(
        study_name=spec.study.name, direction="maximize",
        sampler=reseeded_sampler(spec, 0), pruner=build_pruner(spec.study.pruner),
    )
config = dict(spec.trainer.config)
for _ in range(spec.study.n_trials):
    trial = study.ask()
    params = space.sample(trial, spec.search_space)
    try:
        value = curves.run({**config, **params}, Ctx(trial))["score"]
    except optuna.TrialPruned:
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    else:
        study.tell(trial, value)
print(json.dumps([[t.number, t.state.name, t.params, t.intermediate_values, t.value]
                  for t in study.trials]))
"""


def _replay(path: Path, threads: int) -> list[Row]:
    import json

    done = subprocess.run(
        [sys.executable, "-c", _REPLAY, str(path)],
        cwd=path.parent,
        env=_env(threads),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    return [
        (n, state, params, {int(k): v for k, v in steps.items()}, value)
        for n, state, params, steps, value in json.loads(done.stdout)
    ]


@pytest.mark.processes
def test_the_same_trials_with_one_and_four_blas_threads(tmp_path: Path) -> None:
    one = _replay(_study_file(tmp_path / "one"), 1)
    four = _replay(_study_file(tmp_path / "four"), 4)
    run = _run(_study_file(tmp_path / "run"), 4)
    assert len(one) == N_TRIALS
    assert {row[1] for row in one} == {"COMPLETE", "PRUNED"}  # the pruner had its say too
    assert four == one
    assert run == one


def test_the_model_runs_its_linear_algebra_on_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    from threadpoolctl import threadpool_info

    seen: list[int] = []
    fit = mf_gp._fit

    def recording(*args: Any) -> np.ndarray:
        seen.extend(lib["num_threads"] for lib in threadpool_info())
        return fit(*args)

    monkeypatch.setattr(mf_gp, "_fit", recording)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = optuna.create_study(direction="maximize", sampler=MultiFidelityGPSampler(seed=0))
    for i in range(12):
        study.add_trial(
            optuna.trial.create_trial(
                state=TrialState.COMPLETE,
                value=math.sin(3 * i / 12),
                params={"x": i / 12},
                distributions={"x": FloatDistribution(0.0, 1.0)},
                intermediate_values={1: math.sin(3 * i / 12)},
            )
        )
    study.ask().suggest_float("x", 0.0, 1.0)
    assert seen and set(seen) == {1}
