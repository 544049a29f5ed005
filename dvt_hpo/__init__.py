"""dvt-hpo: hyperparameter optimization of PyTorch training, every trial in its own process.

Heavy modules load lazily: importing ``dvt_hpo`` imports neither optuna nor torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dvt_hpo.exceptions import BatchSizeError, DvtHpoError, SpecError, TrialPruned

__version__ = "0.1.0"

if TYPE_CHECKING:
    from dvt_hpo.run.runner import run_study
    from dvt_hpo.trial.context import TrialContext

_LAZY = {
    "run_study": ("dvt_hpo.run.runner", "run_study"),
    "TrialContext": ("dvt_hpo.trial.context", "TrialContext"),
    "load_spec": ("dvt_hpo.studyfile", "load_spec"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'dvt_hpo' has no attribute {name!r}")


__all__ = [
    "BatchSizeError",
    "DvtHpoError",
    "SpecError",
    "TrialContext",
    "TrialPruned",
    "load_spec",
    "run_study",
    "__version__",
]
