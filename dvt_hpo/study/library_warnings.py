"""Python warnings of Optuna and other libraries, said as one line each in dvt-hpo's voice.

Python prints a warning as its source file, line number, category, message and the source
line that raised it (``.../optuna/trial/_trial.py:543: UserWarning: ...`` then
``return self.study.pruner.prune(...)``): noise to a user, who did not write that line. The
CLI runs every command inside :func:`said_once`: each warning becomes one line naming the
library and the message, said once per run however often it is raised. A warning whose meaning
for the study is known is said as that meaning instead (:data:`MEANINGS`).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import PurePath

__all__ = ["MEANINGS", "WILCOXON_NO_CURVE", "one_line", "said_once"]

# Optuna's WilcoxonPruner (and dvt-hpo's, which follows it) when the best trial reported no
# per-epoch values: a study resumed from trials that reported no curve, or an enqueued value.
WILCOXON_NO_CURVE = (
    "The best trial has no intermediate values so WilcoxonPruner cannot prune trials."
)
# A warning's text (its start) -> what it means for the study, said instead of it.
MEANINGS = {
    WILCOXON_NO_CURVE: "note: the Wilcoxon test prunes nothing until a trial that reported a "
    "curve is the best: it compares each trial's epochs with the best trial's, and the best "
    "trial so far reported no per-epoch values",
}


def _library(filename: str) -> str:
    """The top-level package a warning came from (``optuna``), from its file's path."""
    parts = PurePath(filename).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            rest = parts[parts.index(marker) + 1 :]
            if rest:
                return PurePath(rest[0]).stem.split("-")[0]
    for name in ("optuna", "dvt_hpo", "torch", "sqlalchemy", "mlflow"):
        if name in parts:
            return name
    return PurePath(filename).stem or "Python"


def one_line(message: Warning | str, category: type[Warning], filename: str) -> str:
    """The line said for a warning: its meaning when known, else the library and message."""
    text = " ".join(str(message).split())
    for known, meaning in MEANINGS.items():
        if text.startswith(known):
            return meaning
    return f"warning from {_library(filename)}: {text} ({category.__name__})"


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextmanager
def said_once(out: Callable[[str], None] | None = None) -> Iterator[None]:
    """Within the block, every warning Python shows is one line through ``out`` (stderr by
    default), each distinct line once. The filters still decide what is shown; only how."""
    seen: set[str] = set()
    say = out or _stderr
    previous = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: object = None,
        line: str | None = None,
    ) -> None:
        text = one_line(message, category, filename)
        if text not in seen:
            seen.add(text)
            say(text)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous
