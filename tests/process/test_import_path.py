"""The one rule for where an entry point's module is found (dvt_hpo.process.import_path)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from dvt_hpo.process import import_path


def _module(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text("def run(config, ctx):\n    return {}\n")
    return path


def test_study_folder_first_and_never_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    study, work = tmp_path / "study", tmp_path / "work"
    _module(study, "ip_both")
    _module(work, "ip_both")
    _module(work, "ip_cwd_only")
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(work))  # as `python -m dvt_hpo` puts it there
    monkeypatch.delenv("PYTHONPATH", raising=False)

    assert import_path.find_module("ip_both", study)
    assert not import_path.find_module("ip_cwd_only", study)
    with import_path.study_imports(study):
        assert sys.path[0] == str(study) and str(work) not in sys.path


def test_a_working_directory_named_on_pythonpath_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The trials get PYTHONPATH too (search_path), so validate must find what it names.
    work = tmp_path / "work"
    _module(work, "ip_on_pythonpath")
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(work))
    monkeypatch.setenv("PYTHONPATH", str(work))

    assert import_path.find_module("ip_on_pythonpath", tmp_path / "study")
    assert import_path.search_path(tmp_path / "study") == [str(tmp_path / "study"), str(work)]
    assert os.pathsep not in import_path.child_pythonpath(tmp_path / "s", {})
