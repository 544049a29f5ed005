"""Keep everything a deepvisiontools training writes inside the trial's folder.

Unless told otherwise it writes ``./mlruns`` (MLflow's store and its run folders), ``./tb``,
``./.dvt_staging``, ``~/.config/Ultralytics`` (ultralytics' settings file, created at import)
and matplotlib's and torch's caches under ``$HOME``. Before deepvisiontools is imported, the
trial process points ``HOME``, the XDG folders and the libraries' own variables into
``<trial_dir>/home`` and makes ``<trial_dir>/work`` its working directory; the trainer config
then gets explicit output folders (see :func:`output_overrides`).

Pure (stdlib only), so it is tested without deepvisiontools.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TrialFolders:
    """The folders of one trial process."""

    root: Path  # the trial's folder (ctx.trial_dir)
    home: Path  # $HOME and the XDG folders
    work: Path  # the working directory
    run: Path  # deepvisiontools' run folder (output_dir)

    @classmethod
    def under(cls, root: Path) -> TrialFolders:
        root = root.resolve()
        return cls(root=root, home=root / "home", work=root / "work", run=root / "run")

    @property
    def config(self) -> Path:
        """``$XDG_CONFIG_HOME`` and ``$YOLO_CONFIG_DIR``."""
        return self.home / ".config"

    def create(self) -> None:
        # The config folder must exist before ultralytics is imported: it keeps its settings in
        # $YOLO_CONFIG_DIR/Ultralytics only when $YOLO_CONFIG_DIR is a writable folder, and
        # otherwise falls back to /tmp/Ultralytics (8.4), outside the trial's folder.
        for path in (self.config, self.work, self.run):
            path.mkdir(parents=True, exist_ok=True)


def isolated_env(folders: TrialFolders, env: MutableMapping[str, str]) -> dict[str, str]:
    """Point ``env`` (``os.environ``) into ``folders``; returns what it set.

    Pretrained-weight caches (``TORCH_HOME``, ``HF_HOME``) keep pointing at the user's real
    cache, so weights downloaded once are not fetched again by every trial: reading a cache
    is the one thing a trial does outside its folder. ``MLFLOW_TRACKING_URI`` is left alone
    when the user set it (a team server), else set to the trial's own store.
    """
    real_home = Path(env.get("HOME") or Path.home())
    real_cache = Path(env.get("XDG_CACHE_HOME") or real_home / ".cache")
    home = folders.home
    values = {
        "TORCH_HOME": env.get("TORCH_HOME") or str(real_cache / "torch"),
        "HF_HOME": env.get("HF_HOME") or str(real_cache / "huggingface"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(folders.config),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        # ultralytics 8.4 appends "Ultralytics" (settings in home/.config/Ultralytics, as
        # without the variable); older versions used the folder itself.
        "YOLO_CONFIG_DIR": str(folders.config),
        "MPLCONFIGDIR": str(folders.config / "matplotlib"),
        # Progress bars per batch fill stderr.log; the epoch reports say the same.
        "TQDM_DISABLE": env.get("TQDM_DISABLE", "1"),
    }
    if not env.get("MLFLOW_TRACKING_URI"):
        values["MLFLOW_TRACKING_URI"] = mlflow_store_uri(folders)
    env.update(values)
    return values


def mlflow_store_uri(folders: TrialFolders) -> str:
    """The trial's own MLflow store (the file deepvisiontools would create under ``./mlruns``)."""
    return f"sqlite:///{(folders.run / 'mlruns' / 'mlflow.db').as_posix()}"


def output_overrides(
    config: MutableMapping[str, Any], folders: TrialFolders, env: MutableMapping[str, str]
) -> None:
    """Set the trainer config's output folders to the trial's (in place).

    ``output_dir`` and ``checkpoint.output_dir`` (the run folder's root), TensorBoard's folder
    (``<run>/<run name>/tb``) and MLflow's store (``logging.mlflow.store_dir``, and its
    ``tracking_uri`` unless the user gave one or ``$MLFLOW_TRACKING_URI`` names a server).
    """
    config["output_dir"] = str(folders.run)
    config.setdefault("checkpoint", {})["output_dir"] = None
    logging = config.setdefault("logging", {})
    mlflow = dict(logging.get("mlflow") or {})
    mlflow["store_dir"] = str(folders.run)
    if not mlflow.get("tracking_uri"):
        mlflow["tracking_uri"] = env.get("MLFLOW_TRACKING_URI") or mlflow_store_uri(folders)
    logging["mlflow"] = mlflow


def enter(folders: TrialFolders) -> None:
    """Create the folders, redirect the environment and change into ``folders.work``."""
    folders.create()
    isolated_env(folders, os.environ)
    os.chdir(folders.work)


__all__ = ["TrialFolders", "enter", "isolated_env", "mlflow_store_uri", "output_overrides"]
