"""The wording shared by every bad-input message: how a value is shown, and did-you-mean.

Stdlib only: the trial process and the trainer config use it as well as the study loader.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

__all__ = ["closest", "describe", "did_you_mean"]


def describe(value: Any) -> str:
    """``'ten' (str)``, ``[2, 3] (list)``, ``null``: a value as a message shows it (≤ 80 chars)."""
    if value is None:
        return "null"
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} ({type(value).__name__})"


def closest(word: str, options: Iterable[Any]) -> str | None:
    """The option nearest to ``word`` (a typo), or ``None`` when none is close."""
    close = difflib.get_close_matches(str(word), [str(o) for o in options], n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(word: str, options: Iterable[Any]) -> str:
    """``"; did you mean 'x'?"`` for the closest option, or ``""``."""
    match = closest(word, options)
    return f"; did you mean {match!r}?" if match is not None else ""
