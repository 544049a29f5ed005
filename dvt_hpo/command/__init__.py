"""``trainer.command``: a training script run as the trial's trainer.

The entry point ``dvt_hpo.command:run`` is stored in the base records of command studies, so the
name stays; it loads lazily, so reading :mod:`dvt_hpo.command.template` pulls in nothing more.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "run":
        from dvt_hpo.command.script import run

        return run
    raise AttributeError(f"module 'dvt_hpo.command' has no attribute {name!r}")


__all__ = ["run"]
