"""What ``validate`` and ``run`` say of ``tracking.mlflow`` before anything is written: MLflow's
own rule for its file store, read from the installed MLflow (mlflow-skinny is in [test])."""

from __future__ import annotations

import pytest

from dvt_hpo.tracking.check import is_file_store, tracking_problem


@pytest.mark.parametrize(
    ("uri", "file_store"),
    [
        ("mlruns", True),
        ("/abs/mlruns", True),
        ("file:///abs/mlruns", True),
        ("sqlite:///mlflow.db", False),
        ("http://tracking:5000", False),
    ],
)
def test_a_path_or_a_file_uri_is_mlflows_file_store(uri: str, file_store: bool) -> None:
    assert is_file_store(uri) is file_store


def test_a_database_or_a_server_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking_problem("sqlite:///mlflow.db") is None
    assert tracking_problem("http://tracking:5000") is None
    assert tracking_problem(None) is None  # MLflow's default, whatever it is


def test_the_file_store_is_refused_as_mlflow_refuses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    environment_variables = pytest.importorskip("mlflow.environment_variables")
    if not hasattr(environment_variables, "MLFLOW_ALLOW_FILE_STORE"):
        pytest.skip("this MLflow still accepts its file store")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    problem = tracking_problem("file:///tmp/mlruns")
    assert problem is not None and "MLFLOW_ALLOW_FILE_STORE=true" in problem
    # The default URI from the environment is judged the same way.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "mlruns")
    assert tracking_problem(None) is not None
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert tracking_problem("file:///tmp/mlruns") is None
