"""The example studies tune something: in each, the best trial is clearly better than the
worst (issue 18, item 11). ``studies/batch-size-cpu.yaml`` once scored macro-F1 1.0 on every
trial, so its "best" meant nothing.

Each example runs as shipped (its sampler and seed, so the same trials every time) but for
fewer trials; the spread of its first objective over the complete trials must be at least
:data:`CLEARLY` (macro-F1). The deepvisiontools example runs in its own virtualenv
(``tests/backends``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from dvt_hpo.studyfile import load_spec
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.processes

CLEARLY = 0.1
# The study file (relative to studies/) and the overrides that shorten it.
EXAMPLES = {
    "quickstart.yaml": ("study.n_trials=4",),
    "multi-objective.yaml": ("study.n_trials=4",),
    "batch-size-cpu.yaml": ("study.n_trials=4",),
    "command-trainer/study.yaml": ("study.n_trials=4",),
}


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_the_best_trial_is_clearly_better_than_the_worst(tmp_path: Path, example: str) -> None:
    source = REPO_ROOT / "studies" / example
    folder = tmp_path / "study"
    shutil.copytree(source.parent, folder, ignore=shutil.ignore_patterns("*.db", "runs"))
    study_file = folder / source.name
    overrides = EXAMPLES[example]
    argv = [a for o in overrides for a in ("--set", o)]
    done = subprocess.run(
        [sys.executable, "-m", "dvt_hpo", "run", str(study_file), *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    spec = load_spec(study_file, overrides)
    study = optuna.load_study(study_name=spec.study.name, storage=spec.study.storage)
    values = [t.values[0] for t in study.trials if t.state.name == "COMPLETE"]
    assert len(values) >= 2, done.stdout
    assert max(values) - min(values) >= CLEARLY, (sorted(values), done.stdout)
