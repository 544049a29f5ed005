"""``study.budget``: limits in compute beside ``study.n_trials`` (whichever comes first).

``{gpu_hours, cpu_hours, epochs, hours, strict}``, each optional but one limit at least. The
plain values are checked by the schema engine (:class:`~dvt_hpo.spec.model.BudgetSpec`);
this module adds what depends on other sections: a budget in GPU-hours on a study whose trials
run on the CPU would never be spent, so it is refused here, naming ``cpu_hours`` instead.
How the budget is spent and shared is :mod:`dvt_hpo.budget.compute`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from dvt_hpo.config.source import Key
from dvt_hpo.spec.model import BudgetSpec, StudySection, TrialsSpec
from dvt_hpo.studyfile.fields import Reader

__all__ = ["LIMITS", "read_budget"]

# The limits of a budget, in the order messages list them.
LIMITS = ("gpu_hours", "cpu_hours", "epochs", "hours")


def read_budget(
    r: Reader, root: Mapping[str, Any], study: StudySection, trials: TrialsSpec
) -> StudySection:
    """``study`` with its ``budget`` read from the file's ``study.budget`` (null: none)."""
    raw = root.get("study")
    value = raw.get("budget") if isinstance(raw, Mapping) else None
    if value is None:
        return study
    key: Key = ("study", "budget")
    fields = r.section(BudgetSpec, value, key, "study.budget")
    if not any(fields.get(name) is not None for name in LIMITS):
        raise r.err(
            key,
            f"needs at least one limit of {', '.join(LIMITS)} (e.g. study.budget: "
            "{gpu_hours: 200}), or leave study.budget out",
        )
    if fields.get("gpu_hours") is not None and trials.devices == "cpu":
        raise r.err(
            (*key, "gpu_hours"),
            "counts GPU time, but trials.devices is 'cpu': no trial uses a GPU, so it would "
            "never be spent; give the budget as cpu_hours (a trial's CPU threads x its "
            "duration)",
        )
    budget = BudgetSpec(**{**dataclasses.asdict(BudgetSpec()), **fields})
    return dataclasses.replace(study, budget=budget)
