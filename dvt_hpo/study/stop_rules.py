"""When a run stops launching trials, and when it exits 1: pure rules over this run's outcomes.

- ``study.max_failures``: a count, or a share of ``n_trials``;
- without it, :data:`SAME_REASON_STOP`: the first finished trials of a run all failed with one
  and the same reason (a typo in the trainer, unreadable data: every trial fails alike, and
  the rest of ``n_trials`` would only repeat it);
- a run that finished trials and completed or pruned none exits 1 with the most common reason.

Interrupted attempts (Ctrl-C, SIGTERM) are not failures of the trial and count for none.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

SAME_REASON_STOP = 3


class Finished(Protocol):
    """What the rules read of a finished trial (:class:`~dvt_hpo.study.outcome.TrialOutcome`)."""

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
    if len({o.reason for o in first}) != 1:
        return None
    return (
        f"stopping: the first {SAME_REASON_STOP} trials of this run all failed with the same "
        f"reason: {first[0].reason} (set study.max_failures to change this rule)"
    )


def nothing_succeeded(outcomes: Sequence[Finished]) -> str | None:
    """The exit-1 message of a run that finished trials and none completed or was pruned."""
    finished = [o for o in outcomes if not o.interrupted]
    if not finished or any(o.state in ("COMPLETE", "PRUNED") for o in finished):
        return None
    reason, count = Counter(o.reason or "unknown" for o in finished).most_common(1)[0]
    return (
        f"no trial of this run succeeded ({len(finished)} failed); most common reason "
        f"({count} of {len(finished)}): {reason}"
    )


__all__ = [
    "SAME_REASON_STOP",
    "max_failures_limit",
    "nothing_succeeded",
    "stop_message",
]
