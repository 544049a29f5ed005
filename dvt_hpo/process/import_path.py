"""Where an entry point's module is looked for: one rule for `validate` and for trials.

The rule: the study file's folder first, then what the orchestrator's interpreter can import
(``PYTHONPATH`` as the user set it, then installed packages). The orchestrator's working
directory is not searched: a study behaves the same wherever ``dvt-hpo run`` is started from.
A ``mytrainer.py`` beside the study file therefore wins over an installed ``mytrainer``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path


def search_path(study_dir: Path, env: Mapping[str, str] | None = None) -> list[str]:
    """The ``PYTHONPATH`` entries a trial process gets, in order."""
    env = os.environ if env is None else env
    entries = [str(study_dir)]
    for entry in env.get("PYTHONPATH", "").split(os.pathsep):
        if entry and entry not in entries:
            entries.append(entry)
    return entries


def child_pythonpath(study_dir: Path, env: Mapping[str, str] | None = None) -> str:
    """The value of ``PYTHONPATH`` for a trial process."""
    return os.pathsep.join(search_path(study_dir, env))


def _without_cwd(path: list[str]) -> list[str]:
    """``path`` less the working directory, unless ``PYTHONPATH`` names it: a folder the user
    put on ``PYTHONPATH`` is on the trials' path too (:func:`search_path`), wherever it is."""
    cwd = os.getcwd()
    named = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    return [
        p for p in path if p != "" and (os.path.abspath(p) != cwd or os.path.abspath(p) in named)
    ]


@contextlib.contextmanager
def study_imports(study_dir: Path) -> Iterator[None]:
    """``sys.path`` as a trial sees it (the study folder first, no working directory) and no
    ``.pyc`` written, for the duration of the block."""
    old_path = list(sys.path)
    old_bytecode = sys.dont_write_bytecode
    sys.path[:] = [str(study_dir)] + [p for p in _without_cwd(old_path) if p != str(study_dir)]
    sys.dont_write_bytecode = True
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.path[:] = old_path
        sys.dont_write_bytecode = old_bytecode


def find_module(module: str, study_dir: Path) -> bool:
    """Whether ``module`` can be found by the rule above, without importing it (its parent
    packages are imported, as :func:`importlib.util.find_spec` does)."""
    with study_imports(study_dir):
        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            return False


__all__ = ["child_pythonpath", "find_module", "search_path", "study_imports"]
