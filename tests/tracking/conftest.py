"""MLflow's stores keep artifacts under ``./mlruns`` unless told otherwise: each test here runs
in its own folder, never the repository root."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # A tracking URI from the developer's shell must not send the tests' runs elsewhere.
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
