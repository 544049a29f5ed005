"""The built-in torch trainer (entry point ``dvt_hpo.train:run``).

Importing this package does not import torch: the orchestrator uses :class:`TrainerConfig` to
validate configs, and torch is imported only when :func:`run` or :func:`train_file` trains.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from dvt_hpo.exceptions import SpecError
from dvt_hpo.train.config import TrainerConfig, load_trainer_config, set_path
from dvt_hpo.train.schema import field_type_at

__all__ = ["TrainerConfig", "apply_overrides", "load_trainer_config", "run", "train_file"]


def run(config: dict[str, Any], ctx: Any) -> dict[str, float]:
    """Train with ``config`` (a plain dict, see :class:`TrainerConfig`), reporting to ``ctx``."""
    from dvt_hpo.train.trainer import run as _run

    return _run(config, ctx)


def apply_overrides(cfg: TrainerConfig, overrides: Iterable[str]) -> TrainerConfig:
    """``cfg`` with ``path=value`` overrides applied (values parsed as YAML), then re-checked.

    Raises :class:`SpecError` (``file="--set"``) on a malformed override or an unknown path.
    """
    import yaml

    data = cfg.to_dict()
    for text in overrides:
        path, sep, raw = text.partition("=")
        path = path.strip()
        if not sep or not path:
            raise SpecError(f"expected path=value, got {text!r}", file="--set")
        try:
            field_type_at(TrainerConfig, path)
        except KeyError as exc:
            raise SpecError(str(exc.args[0]), file="--set", field=path) from None
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError as exc:
            raise SpecError(
                f"value {raw!r} is not valid YAML: {exc}", file="--set", field=path
            ) from None
        set_path(data, path, value)
    return TrainerConfig.from_dict(data, source="--set")


def train_file(path: str | os.PathLike[str], overrides: Iterable[str] = ()) -> dict[str, float]:
    """Train the YAML trainer config at ``path`` in this process (``dvt-hpo train``).

    Prints one line per epoch and returns the final metrics; checkpoints as configured.
    """
    from dvt_hpo.context import LocalContext
    from dvt_hpo.train.trainer import run as _run

    cfg = apply_overrides(load_trainer_config(path), overrides)
    return _run(cfg, LocalContext())
