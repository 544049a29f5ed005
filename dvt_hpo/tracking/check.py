"""What ``validate`` and ``run`` check of ``tracking.mlflow`` before anything is written: that
MLflow is installed and accepts the tracking URI as MLflow itself will when the run opens it.

MLflow 3 refuses its file store (a folder, or a ``file:`` URI) unless
``MLFLOW_ALLOW_FILE_STORE`` is true: found only when the run opened it, it cost an exit 1 with
MLflow's long message after the study had been created. The rule is MLflow's own, read from
MLflow (its ``MLFLOW_ALLOW_FILE_STORE`` setting exists exactly in the releases that refuse),
so an MLflow that drops or changes it is followed, not guessed; the import (a second or two)
happens only for a file-store URI.
"""

from __future__ import annotations

import importlib.util
import os

__all__ = ["is_file_store", "tracking_problem"]


def is_file_store(uri: str) -> bool:
    """A plain path or a ``file:`` URI: MLflow's file store."""
    return uri.startswith("file:") or "://" not in uri


def tracking_problem(uri: str | None) -> str | None:
    """Why MLflow would refuse ``uri`` (``None``: MLflow's default, ``$MLFLOW_TRACKING_URI``
    when set), or ``None`` when it accepts it."""
    if importlib.util.find_spec("mlflow") is None:
        return "tracking.mlflow is set but MLflow is not installed: pip install 'dvt-hpo[mlflow]'"
    if uri is None:
        uri = os.environ.get("MLFLOW_TRACKING_URI") or None
    if uri is None or not is_file_store(uri):
        return None
    try:
        from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE
    except ImportError:  # an MLflow that still accepts its file store
        return None
    if MLFLOW_ALLOW_FILE_STORE.get():
        return None
    import mlflow  # imported already, with its settings

    return (
        f"{uri!r} is MLflow's file store, which MLflow {mlflow.__version__} refuses (maintenance "
        "mode): use a database such as sqlite:///mlflow.db (relative to the study file), or "
        "set MLFLOW_ALLOW_FILE_STORE=true to keep the file store"
    )
