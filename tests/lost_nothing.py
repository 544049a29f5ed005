"""What "a killed worker lost nothing" means for a finished study, read from its trials alone.

Shared by the kill tests (tests/recovery/test_kill_points.py) and the soak (benchmarks/reliability/kill_soak.py).
It restates the budget rule from Optuna's own retry attrs rather than calling
:mod:`dvt_hpo.recovery.retries`, so that a bug there cannot hide itself here.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

OVER_BUDGET = "dvt_hpo:over_budget"


def _history(trial: Any) -> list[int]:
    return list(trial.system_attrs.get("retry_history", []))


def problems(trials: list[Any], n_trials: int) -> list[str]:
    """Every way the finished study ``trials`` lost something; ``[]`` when it lost nothing.

    - no trial is left RUNNING or WAITING;
    - every FAIL is retried by exactly one copy (the trial whose ``retry_history`` ends with
      it), with the same params (a copy of an attempt killed before all its params were
      sampled keeps those it had);
    - exactly ``n_trials`` trials count (every trial but the FAILs a copy superseded and those
      closed as over budget), and every one that counts is COMPLETE (the trainer here never
      fails by itself).
    """
    found: list[str] = []
    by_number = {t.number: t for t in trials}
    left = [(t.number, t.state.name) for t in trials if t.state.name in ("RUNNING", "WAITING")]
    if left:
        found.append(f"left unfinished: {left}")
    copies: Counter[int] = Counter(h[-1] for t in trials if (h := _history(t)))
    superseded = {n for t in trials for n in _history(t)}
    for t in trials:
        if t.state.name != "FAIL" or t.system_attrs.get(OVER_BUDGET):
            continue
        if copies[t.number] != 1:
            found.append(f"trial {t.number} FAIL has {copies[t.number]} copies, not 1")
    for t in trials:
        history = _history(t)
        if not history:
            continue
        original = by_number.get(history[-1])
        if original is None:
            found.append(f"trial {t.number} retries trial {history[-1]}, which does not exist")
            continue
        kept = {k: v for k, v in t.params.items() if k in original.params}
        if kept != original.params:
            found.append(
                f"trial {t.number} retries trial {original.number} with params {t.params}, "
                f"not {original.params}"
            )
    counted = [
        t
        for t in trials
        if not t.system_attrs.get(OVER_BUDGET)
        and not (t.state.name == "FAIL" and t.number in superseded)
    ]
    if len(counted) != n_trials:
        found.append(f"{len(counted)} trials count, not n_trials={n_trials}")
    not_complete = [(t.number, t.state.name) for t in counted if t.state.name != "COMPLETE"]
    if not_complete:
        found.append(f"counted but not COMPLETE: {not_complete}")
    return found


__all__ = ["problems"]
