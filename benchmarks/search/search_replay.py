"""The same LCBench studies in one process, for grids too large to run through ``dvt-hpo run``.

A study of ``benchmarks/search/search_efficiency.py`` spends most of its wall time on the
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

With ``trials.pause`` the replay pauses and continues trials as the loop does, through the
loop's own functions: a trial the pruner stops before its last epoch is marked paused
(:func:`dvt_hpo.recovery.pause.mark`, while RUNNING) and told PRUNED; before each ``ask``, when
no trial is WAITING, :func:`dvt_hpo.recovery.pause.continue_paused` may enqueue the copy of the
paused trial the promotion rule picks (Optuna's retry callback); the copy the next ``ask``
returns reports its chain's earlier values (no pruning decision on them), then trains on from
the paused step, each epoch reported, pruned or paused again, and counted in the budget.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import fast_log_ndtr
import yaml

PAUSED = "PAUSED"  # a row's state: told PRUNED, marked paused (trials.pause)


class Row(NamedTuple):
    """One attempt of a replayed study."""

    number: int
    state: str  # COMPLETE, PRUNED or PAUSED
    epochs: int  # the epochs this attempt trained (a continuation: after its chain's pause)
    value: float | None  # COMPLETE: the last value
    params: dict[str, Any]  # what ``curve(p)[0]`` records of the sampled params
    continues: int | None = None  # a continuation: the number of the paused trial it continues


def replay_study(
    doc: dict[str, Any], task: str, budget: int, surrogate: Any, params: tuple[str, ...]
) -> tuple[list[Row], float]:
    """The trials of the LCBench study ``doc`` (:class:`Row`) and the wall time; like the
    trainer, a trial starting with the budget spent ends the study."""
    epochs = int(doc["trainer"]["config"]["epochs"])

    def curve(sampled: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        hp = {name: sampled[name] for name in params}
        return hp, surrogate.curve(task, hp, epochs)["val_accuracy"]

    return replay_curves(doc, budget, curve)


def replay_curves(
    doc: dict[str, Any],
    budget: int,
    curve: Callable[[dict[str, Any]], tuple[dict[str, Any], Sequence[float]]],
) -> tuple[list[Row], float]:
    """The trials of the study ``doc`` whose trial with sampled params ``p`` reports
    ``curve(p)[1]`` (one value per epoch of ``trainer.config.epochs``, steps 1 to ``epochs``;
    ``curve(p)[0]`` is what a row records of ``p``); a trial starting with ``budget`` epochs
    spent ends the study. With ``trials.pause`` a stop before the last epoch pauses the trial
    and a continuation's row counts only the epochs it trained."""
    import optuna

    from dvt_hpo.optuna_api.private import frozen_at_ask, storage_of, trial_id_of
    from dvt_hpo.recovery import pause as pausing
    from dvt_hpo.recovery.retries import retry_history
    from dvt_hpo.sampling import space
    from dvt_hpo.sampling.optuna_factory import build_pruner
    from dvt_hpo.sampling.promotion import eta_of
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
    storage = storage_of(study)
    pause = spec.trials.pause
    maximize = spec.objective.direction == "maximize"
    eta = eta_of(spec.study.pruner.kind, spec.study.pruner.kwargs)
    waiting = (optuna.trial.TrialState.WAITING,)
    epochs = int(doc["trainer"]["config"]["epochs"])
    spent = 0
    out: list[Row] = []
    while spent < budget:
        if pause and not study.get_trials(deepcopy=False, states=waiting):
            # A slot is free and nothing waits: the loop's own choice (PauseKeeper.continue_one).
            pausing.continue_paused(study, maximize=maximize, eta=eta, lock=contextlib.nullcontext)
        trial = study.ask()
        sampled = space.sample(trial, spec.search_space)
        hp, values = curve(sampled)
        history = retry_history(frozen_at_ask(trial)) if pause else []
        continues, first = None, 1
        if history:
            # A continuation: the chain's reports up to the paused step first, as the
            # resume plan splices them in, with no pruning decision on them.
            continues = history[-1]
            before = next(t for t in study.get_trials(deepcopy=False) if t.number == continues)
            for step, earlier in sorted(before.intermediate_values.items()):
                trial.report(earlier, step)
            first = max(before.intermediate_values) + 1
        state, value, trained = "COMPLETE", None, 0
        for epoch in range(first, epochs + 1):
            spent += 1
            trained += 1
            trial.report(float(values[epoch - 1]), epoch)
            if trial.should_prune():
                state = PAUSED if pause and epoch < epochs else "PRUNED"
                break
        if state == "COMPLETE":
            value = float(values[-1])
            study.tell(trial, value)
        else:
            if state == PAUSED:
                pausing.mark(storage, trial_id_of(trial))  # while RUNNING, before the tell
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        out.append(Row(trial.number, state, trained, value, hp, continues))
    return out, time.perf_counter() - start
