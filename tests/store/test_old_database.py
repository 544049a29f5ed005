"""A study database written before the house plan (commit 1755f31, the flat ``dvt_hpo/*.py``
layout) resumes under today's layout.

``tests/fixtures/old_layout/old-studies.db`` was made by that code with the two study files beside
it: ``old-builtin`` (built-in trainer) has 2 COMPLETE trials and trial 2 left RUNNING by a
``kill -9`` of its orchestrator; ``old-command`` (a command trainer, whose base record stores the
entry point ``dvt_hpo.command:run``) has 2 COMPLETE trials and trial 2 interrupted by Ctrl-C (FAIL
with its WAITING retry copy). Resuming must finish each budget, rerun the interrupted trial with
its parameters, and keep the completed trials as they were.

``tests/fixtures/main_layout/main-studies.db`` was made the same way by main at 686e416, the
layout before issue #30 moved modules between packages: ``main-command`` has 2 COMPLETE trials
and trial 2 interrupted by Ctrl-C.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import optuna
import pytest

from tests.conftest import run_dvt_hpo

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

pytestmark = pytest.mark.processes


def _copy(tmp_path: Path, layout: str) -> Path:
    folder = tmp_path / "old"
    shutil.copytree(FIXTURES / layout, folder)
    return folder


def _trials(folder: Path, name: str) -> list[optuna.trial.FrozenTrial]:
    (database,) = folder.glob("*.db")
    storage = f"sqlite:///{database}"
    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)


@pytest.mark.parametrize(
    ("layout", "study_file", "name", "state_before"),
    [
        ("old_layout", "builtin.yaml", "old-builtin", "RUNNING"),
        ("old_layout", "command.yaml", "old-command", "FAIL"),
        ("main_layout", "command.yaml", "main-command", "FAIL"),
    ],
)
def test_a_study_written_by_an_earlier_layout_resumes(
    tmp_path: Path, layout: str, study_file: str, name: str, state_before: str
) -> None:
    old_studies = _copy(tmp_path, layout)
    before = _trials(old_studies, name)
    assert [t.state.name for t in before[:3]] == ["COMPLETE", "COMPLETE", state_before]
    interrupted = before[2].params

    done = run_dvt_hpo("run", study_file, cwd=old_studies)
    assert done.returncode == 0, done.stdout + done.stderr

    after = _trials(old_studies, name)
    complete = [t for t in after if t.state.name == "COMPLETE"]
    assert len(complete) == 4  # the exact budget
    assert not [t for t in after if t.state.name in ("RUNNING", "WAITING")]
    # The completed trials are kept as they were.
    for old, new in zip(before[:2], after[:2], strict=True):
        assert (new.state.name, new.value, new.params) == ("COMPLETE", old.value, old.params)
    # The interrupted trial is FAIL and rerun once, with its parameters.
    assert after[2].state.name == "FAIL"
    retries = [t for t in complete if t.user_attrs.get("retry_of") == 2]
    assert len(retries) == 1 and retries[0].params == interrupted

    status = run_dvt_hpo("status", study_file, cwd=old_studies)
    assert status.returncode == 0, status.stderr
    assert f"study {name!r}" in status.stdout
    best = run_dvt_hpo("best", study_file, cwd=old_studies)
    assert best.returncode == 0, best.stderr
