"""When a run stops launching trials, and when it exits 1: pure rules over this run's outcomes.

- ``study.max_failures``: a count, or a share of ``n_trials``;
- without it, :data:`SAME_REASON_STOP`: the first finished trials of a run all failed alike (a
  typo in the trainer, unreadable data: every trial fails alike, and the rest of ``n_trials``
  would only repeat it). Alike is the same failure, not the same string: the reasons are
  compared by :func:`failure_kind`, the error's type and message with the numbers, paths and
  quoted values that vary per trial masked (``ValueError: bad lr 0.0123`` is one failure
  whatever the lr);
- a run that finished trials and completed or pruned none exits 1 with the most common reason.

Interrupted attempts (Ctrl-C, SIGTERM) are not failures of the trial and count for none; nor
do attempts that failed of the machine and are retried (their outcome is marked interrupted too):
a broken node is :mod:`dvt_hpo.recovery.node_health`'s rule, which stops only the worker on it.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

SAME_REASON_STOP = 3

# What varies from one trial to the next in a failure's message (applied in this order).
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:~|\.{1,2})?(?:[\w.@+-]*/)+[\w.@+-]*")
_NUMBER = re.compile(
    r"(?<![A-Za-z_])(?:0[xX][0-9a-fA-F]+|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
)


def failure_kind(reason: str | None) -> str | None:
    """A failure's reason with what varies per trial masked: quoted values (``'…'``), paths
    (``<path>``) and numbers (``<n>``), so ``ValueError: bad lr 0.0123`` and ``ValueError: bad
    lr 0.0456`` are one failure. Digits inside a name (``macro_f1``, ``conv2d``) are kept."""
    if reason is None:
        return None
    text = _QUOTED.sub("'…'", reason)
    text = _PATH.sub("<path>", text)
    return _NUMBER.sub("<n>", text)


class Finished(Protocol):
    """What the rules read of a finished trial (:class:`~dvt_hpo.results.outcome.TrialOutcome`)."""

    state: str
    reason: str | None
    interrupted: bool


def max_failures_limit(max_failures: int | float | None, n_trials: int | None) -> int | None:
    """``study.max_failures`` as a count (a share is of ``n_trials``, at least 1)."""
    if max_failures is None:
        return None
    if isinstance(max_failures, float) and max_failures < 1:
        if n_trials is None:
            return None
        return max(1, math.ceil(max_failures * n_trials))
    return int(max_failures)


def stop_message(
    outcomes: Sequence[Finished], max_failures: int | float | None, n_trials: int | None
) -> str | None:
    """Why this run stops launching, after its latest outcome; ``None`` to go on."""
    finished = [o for o in outcomes if not o.interrupted]
    failed = [o for o in finished if o.state == "FAIL"]
    limit = max_failures_limit(max_failures, n_trials)
    if limit is not None:
        if len(failed) < limit:
            return None
        return (
            f"stopping: {len(failed)} trials failed in this run, reaching "
            f"study.max_failures={max_failures}; last reason: {failed[-1].reason}"
        )
    if max_failures is not None:
        return None  # a share without n_trials: the loader refuses it; nothing to apply
    first = finished[:SAME_REASON_STOP]
    if len(first) < SAME_REASON_STOP or any(o.state != "FAIL" for o in first):
        return None
    if len({failure_kind(o.reason) for o in first}) != 1:
        return None
    same = len({o.reason for o in first}) == 1
    alike = (
        "with the same reason"
        if same
        else "alike (the same error, numbers, paths and quotes aside)"
    )
    return (
        f"stopping: the first {SAME_REASON_STOP} trials of this run all failed {alike}: "
        f"{first[0].reason} (set study.max_failures to change this rule)"
    )


def nothing_succeeded(outcomes: Sequence[Finished]) -> str | None:
    """The exit-1 message of a run that finished trials and none completed or was pruned."""
    finished = [o for o in outcomes if not o.interrupted]
    if not finished or any(o.state in ("COMPLETE", "PRUNED") for o in finished):
        return None
    kinds = Counter(failure_kind(o.reason or "unknown") for o in finished)
    kind, count = kinds.most_common(1)[0]
    reason = next(
        o.reason or "unknown" for o in finished if failure_kind(o.reason or "unknown") == kind
    )
    return (
        f"no trial of this run succeeded ({len(finished)} failed); most common reason "
        f"({count} of {len(finished)}): {reason}"
    )


__all__ = [
    "SAME_REASON_STOP",
    "failure_kind",
    "max_failures_limit",
    "nothing_succeeded",
    "stop_message",
]
