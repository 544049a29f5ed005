"""The best trial of a study as a trainer config, ready for ``dvt-hpo train``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dvt_hpo import space

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec import StudySpec


def _has_path(config: Any, path: str) -> bool:
    try:
        space.get_path(config, path)
    except (KeyError, IndexError, AttributeError, TypeError):
        return False
    return True


def best_config(spec: StudySpec, study: optuna.Study) -> dict[str, Any]:
    """The full trainer config of the best trial, with its found batch size and checkpointing
    back on, ready for ``dvt-hpo train``."""
    best = study.best_trial
    params = {d.name: best.params[d.name] for d in spec.search_space if d.name in best.params}
    config = space.apply(spec.trainer.config, spec.search_space, params)
    bs = best.user_attrs.get("batch_size")
    if spec.batch_size.auto and isinstance(bs, int):
        space.set_path(config, spec.batch_size.path, bs, create=True)
        acc = best.user_attrs.get("accumulate_steps")
        if isinstance(acc, int) and _has_path(config, spec.batch_size.accumulate_path):
            space.set_path(config, spec.batch_size.accumulate_path, acc)
    if _has_path(config, "checkpoint.enable_checkpointing"):
        space.set_path(config, "checkpoint.enable_checkpointing", True)
    return config


__all__ = ["best_config"]
