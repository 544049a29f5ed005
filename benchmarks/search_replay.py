"""The same LCBench studies in one process, for grids too large to run through ``dvt-hpo run``.

A study of ``benchmarks/search_efficiency.py`` spends most of its wall time on the
orchestrator's per-epoch round trip (report, store, prune decision), not on the search. With
one trial at a time, what the search finds depends only on the sampler, the pruner, their seeds
and the reported values, so this module replays a study from the *same study file*, loaded by
dvt-hpo's own loader: the sampler and pruner built by :mod:`dvt_hpo.sampling.optuna_factory` and seeded
as a fresh run seeds them (:func:`dvt_hpo.study.setup.reseeded_sampler`), params drawn by
:func:`dvt_hpo.sampling.space.sample`, each epoch reported and pruned, a complete trial told its last
value (``reduce: last``), a pruned one told PRUNED, on Optuna's in-memory storage. Optuna's TPE
computes its log normal CDF with :mod:`fast_log_ndtr` here, to the same bits (checked when it is
installed).

``search_efficiency.py --engine replay --check N`` runs N studies both ways and stops unless
every trial's params, epochs and value are identical: the replay is only used where it is
shown to be what ``dvt-hpo run`` does.
"""

from __future__ import annotations

import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import fast_log_ndtr
import yaml


def replay_study(
    doc: dict[str, Any], task: str, budget: int, surrogate: Any, params: tuple[str, ...]
) -> tuple[list[tuple[int, str, int, float | None, dict[str, Any]]], float]:
    """The trials of the study ``doc`` (number, state, epochs, value, params) and the wall time;
    like the trainer, a trial starting with the budget spent ends the study."""
    import optuna

    from dvt_hpo.sampling import space
    from dvt_hpo.sampling.optuna_factory import build_pruner
    from dvt_hpo.study.setup import reseeded_sampler
    from dvt_hpo.studyfile import load_spec

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    fast_log_ndtr.install()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "study.yaml"
        path.write_text(yaml.safe_dump(doc))
        spec = load_spec(path)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # The study's name too: Hyperband assigns brackets from a hash of it.
        study = optuna.create_study(
            study_name=spec.study.name,
            direction=spec.objective.direction,
            sampler=reseeded_sampler(spec, 0),
            pruner=build_pruner(spec.study.pruner),
        )
    epochs = int(doc["trainer"]["config"]["epochs"])
    spent = 0
    out: list[tuple[int, str, int, float | None, dict[str, Any]]] = []
    while spent < budget:
        trial = study.ask()
        sampled = space.sample(trial, spec.search_space)
        hp = {name: sampled[name] for name in params}
        acc = surrogate.curve(task, hp, epochs)["val_accuracy"]
        state, value, trained = "COMPLETE", None, epochs
        for epoch in range(1, epochs + 1):
            spent += 1
            trial.report(float(acc[epoch - 1]), epoch)
            if trial.should_prune():
                state, trained = "PRUNED", epoch
                break
        if state == "COMPLETE":
            value = float(acc[-1])
            study.tell(trial, value)
        else:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        out.append((trial.number, state, trained, value, hp))
    return out, time.perf_counter() - start
