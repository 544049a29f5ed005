"""The example studies tune something: in each, the best trial is clearly better than the
worst (issue 18, item 11). ``studies/batch-size-cpu.yaml`` once scored macro-F1 1.0 on every
trial, so its "best" meant nothing.

Each example runs as shipped (its sampler and seed, so the same trials every time) but for
fewer trials, and one at a time where it prunes: with two at once the median pruner compares a
trial with whichever others have reported by then, so which trials complete depended on timing.
The spread of its first objective over the complete trials, and the pruned ones at their last
report, must be at least :data:`CLEARLY` (macro-F1): a CI run pruned the command trainer's worst
trial, and the spread of the complete ones alone was 0.077. The deepvisiontools example runs in its own virtualenv
(``tests/backends``).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import optuna
import pytest

from dvt_hpo.studyfile import load_spec
from tests.conftest import REPO_ROOT, run_dvt_hpo

pytestmark = pytest.mark.processes

CLEARLY = 0.1
# The study file (relative to studies/) and the overrides that shorten it.
EXAMPLES = {
    "quickstart.yaml": ("study.n_trials=4", "trials.parallel=1"),
    "multi-objective.yaml": ("study.n_trials=4",),
    "batch-size-cpu.yaml": ("study.n_trials=4",),
    "command-trainer/study.yaml": ("study.n_trials=4", "trials.parallel=1"),
}


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_the_best_trial_is_clearly_better_than_the_worst(tmp_path: Path, example: str) -> None:
    source = REPO_ROOT / "studies" / example
    folder = tmp_path / "study"
    shutil.copytree(source.parent, folder, ignore=shutil.ignore_patterns("*.db", "runs"))
    study_file = folder / source.name
    overrides = EXAMPLES[example]
    argv = [a for o in overrides for a in ("--set", o)]
    done = run_dvt_hpo("run", study_file, *argv, cwd=tmp_path, timeout_s=600)
    assert done.returncode == 0, done.stdout + done.stderr
    # No raw Python warning reaches the terminal: a library's is one line in dvt-hpo's voice
    # (dvt_hpo/study/library_warnings.py), never `file.py:543: UserWarning: ...` and its source.
    assert not re.search(r"\.py:\d+: \w*Warning", done.stderr), done.stderr
    spec = load_spec(study_file, overrides)
    study = optuna.load_study(study_name=spec.study.name, storage=spec.study.storage)
    values = [t.values[0] for t in study.trials if t.state.name == "COMPLETE"]
    assert len(values) >= 2, done.stdout
    # A pruned trial was judged worse on what it reported: it counts at its last report.
    values += [
        t.intermediate_values[max(t.intermediate_values)]
        for t in study.trials
        if t.state.name == "PRUNED" and t.intermediate_values
    ]
    assert max(values) - min(values) >= CLEARLY, (sorted(values), done.stdout)
