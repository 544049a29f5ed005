"""The best trial of a study as a trainer config, ready for ``dvt-hpo train``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dvt_hpo import space
from dvt_hpo.trial_config import absolute_paths, has_path, ran_config

if TYPE_CHECKING:
    import optuna

    from dvt_hpo.spec import StudySpec


def best_config(spec: StudySpec, study: optuna.Study, storage: Any) -> tuple[dict[str, Any], bool]:
    """``(config, as_ran)``: the full trainer config of the best trial, with its found batch
    size and checkpointing back on, relative paths made absolute, ready for ``dvt-hpo train``.

    ``as_ran`` is True when the config is the one the trial ran with (stored when it started);
    False for a trial of an older study, whose config is rebuilt from today's study file.
    """
    best = study.best_trial
    stored = ran_config(storage, storage.get_study_id_from_name(study.study_name), best)
    if stored is not None:
        config = stored
    else:
        params = {d.name: best.params[d.name] for d in spec.search_space if d.name in best.params}
        config = absolute_paths(
            space.apply(spec.trainer.config, spec.search_space, params), spec.path.parent
        )
    bs = best.user_attrs.get("batch_size")
    if isinstance(bs, int) and not isinstance(bs, bool) and spec.batch_size.auto:
        space.set_path(config, spec.batch_size.path, bs, create=True)
        acc = best.user_attrs.get("accumulate_steps")
        if isinstance(acc, int) and has_path(config, spec.batch_size.accumulate_path):
            space.set_path(config, spec.batch_size.accumulate_path, acc)
    if has_path(config, "checkpoint.enable_checkpointing"):
        space.set_path(config, "checkpoint.enable_checkpointing", True)
    return config, stored is not None


__all__ = ["best_config"]
