"""Confusion matrices, per-category F1 and macro-F1 in pure Python (stdlib only).

Shared by the built-in trainer (which reports ``macro_f1``) and anything that scores
classification outputs, so the definition lives in one place and matches scikit-learn's
``f1_score(y_true, y_pred, labels=range(num_classes), average=..., zero_division=...)``.

Conventions:

- A confusion matrix is a square list of lists of counts: ``matrix[t][p]`` is the number of
  samples whose true class is ``t`` and whose predicted class is ``p`` (rows = truth,
  columns = prediction, as in scikit-learn).
- Per-category counts are mappings with the keys ``'tp'``, ``'fp'`` and ``'fn'`` (other keys
  are ignored): the one-vs-rest confusion counts of that category.
- F1 of a category is ``2·tp / (2·tp + fp + fn)``. It is undefined only when the category
  appears neither in the truth nor in the predictions (``2·tp + fp + fn == 0``); it is then
  ``zero_division`` (0.0 by default, like scikit-learn). A category that is predicted but never
  true, or true but never predicted, has F1 0 whatever ``zero_division`` is.
- Macro-F1 is the unweighted mean over **every category given**, including categories absent
  from both truth and predictions (they count as ``zero_division``), which is scikit-learn's
  ``labels=range(num_classes)`` behaviour. With ``zero_division=nan`` such categories are
  left out of the mean instead (also scikit-learn's behaviour).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "accuracy_from_confusion_matrix",
    "category_f1",
    "confusion_matrix",
    "confusion_matrix_from_counts",
    "counts_from_confusion_matrix",
    "macro_f1",
]

_COUNT_KEYS = ("tp", "fp", "fn")


def _count(value: Any, what: str) -> int:
    """``value`` as a non-negative int (numpy and torch integer scalars are accepted)."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a non-negative integer, got the bool {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(
            f"{what} must be a non-negative integer, got {value!r} ({type(value).__name__})"
        ) from None
    if number < 0:
        raise ValueError(f"{what} must be a non-negative integer, got {number}")
    return number


def _check_zero_division(zero_division: float) -> float:
    value = float(zero_division)
    if not (math.isnan(value) or 0.0 <= value <= 1.0):
        raise ValueError(f"zero_division must be between 0 and 1 or nan, got {zero_division!r}")
    return value


def _check_matrix(matrix: Sequence[Sequence[int]]) -> list[list[int]]:
    """A validated copy of ``matrix`` as a square list of lists of non-negative ints."""
    rows = list(matrix)
    if not rows:
        raise ValueError("a confusion matrix needs at least one class, got an empty matrix")
    size = len(rows)
    checked: list[list[int]] = []
    for t, row in enumerate(rows):
        cells = list(row)
        if len(cells) != size:
            raise ValueError(
                f"confusion matrix row {t} has {len(cells)} entries, expected {size} "
                f"(the matrix must be square: {size} rows)"
            )
        checked.append(
            [_count(cell, f"confusion matrix entry [{t}][{p}]") for p, cell in enumerate(cells)]
        )
    return checked


def _label(value: Any, num_classes: int, where: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{where} must be a class index in [0, {num_classes}), got {value!r}")
    try:
        label = operator.index(value)
    except TypeError:
        raise ValueError(
            f"{where} must be a class index in [0, {num_classes}), got {value!r} "
            f"({type(value).__name__})"
        ) from None
    if not 0 <= label < num_classes:
        raise ValueError(f"{where} must be a class index in [0, {num_classes}), got {label}")
    return label


def _paired(y_true: Iterable[Any], y_pred: Iterable[Any]) -> tuple[list[Any], list[Any]]:
    truth, pred = list(y_true), list(y_pred)
    if len(truth) != len(pred):
        raise ValueError(
            f"y_true and y_pred must have the same length, got {len(truth)} and {len(pred)}"
        )
    return truth, pred


def confusion_matrix(
    y_true: Iterable[int], y_pred: Iterable[int], num_classes: int
) -> list[list[int]]:
    """The ``num_classes × num_classes`` confusion matrix of two label sequences.

    Labels are class indices in ``[0, num_classes)``; ``matrix[t][p]`` counts the samples of
    true class ``t`` predicted as ``p``. Raises ``ValueError`` on a label out of range or on
    sequences of different lengths.
    """
    num_classes = _count(num_classes, "num_classes")
    if num_classes < 1:
        raise ValueError(f"num_classes must be at least 1, got {num_classes}")
    truth, pred = _paired(y_true, y_pred)
    matrix = [[0] * num_classes for _ in range(num_classes)]
    for i, (t, p) in enumerate(zip(truth, pred, strict=True)):
        matrix[_label(t, num_classes, f"y_true[{i}]")][_label(p, num_classes, f"y_pred[{i}]")] += 1
    return matrix


def counts_from_confusion_matrix(matrix: Sequence[Sequence[int]]) -> list[dict[str, int]]:
    """Per-class ``{'tp', 'fp', 'fn'}`` counts of a confusion matrix (rows = truth).

    ``tp`` is the diagonal entry, ``fp`` the rest of the class's column (predicted as the class
    but truly another) and ``fn`` the rest of its row (truly the class but predicted as another).
    Raises ``ValueError`` on a ragged, empty or negative matrix.
    """
    checked = _check_matrix(matrix)
    size = len(checked)
    column_sums = [sum(checked[t][p] for t in range(size)) for p in range(size)]
    return [
        {"tp": row[c], "fp": column_sums[c] - row[c], "fn": sum(row) - row[c]}
        for c, row in enumerate(checked)
    ]


def confusion_matrix_from_counts(
    y_true: Iterable[Hashable],
    y_pred: Iterable[Hashable],
    categories: Iterable[Hashable] | None = None,
) -> dict[Hashable, dict[str, int]]:
    """Per-category confusion counts ``{category: {'tp', 'fp', 'fn'}}`` from label sequences.

    Each category's entry is its one-vs-rest confusion matrix, counted from the labels; labels
    can be any hashable values (class indices, names). ``categories`` fixes which categories
    appear and in which order: pass every class of the task (e.g. ``range(num_classes)``) so
    that classes absent from this batch still get an entry (all zeros) and count in
    :func:`macro_f1`, as scikit-learn's ``labels=`` does. A label outside ``categories`` is an
    error. Without ``categories``, the categories are the labels seen in either sequence,
    sorted when they are mutually comparable, otherwise in order of first appearance.
    """
    truth, pred = _paired(y_true, y_pred)
    if categories is None:
        seen = dict.fromkeys([*truth, *pred])
        try:
            order: list[Hashable] = sorted(seen)  # type: ignore[type-var]
        except TypeError:
            order = list(seen)
    else:
        order = list(dict.fromkeys(categories))
        if not order:
            raise ValueError("categories must name at least one category, got none")
    counts: dict[Hashable, dict[str, int]] = {c: {"tp": 0, "fp": 0, "fn": 0} for c in order}
    for i, (t, p) in enumerate(zip(truth, pred, strict=True)):
        for where, label in ((f"y_true[{i}]", t), (f"y_pred[{i}]", p)):
            if label not in counts:
                raise ValueError(f"{where} = {label!r} is not one of the categories {order!r}")
        if t == p:
            counts[t]["tp"] += 1
        else:
            counts[p]["fp"] += 1
            counts[t]["fn"] += 1
    return counts


def category_f1(counts: Mapping[str, int], zero_division: float = 0.0) -> float:
    """F1 of one category from its ``{'tp', 'fp', 'fn'}`` counts: ``2tp / (2tp + fp + fn)``.

    Returns ``zero_division`` when the category is in neither the truth nor the predictions
    (``2tp + fp + fn == 0``), like scikit-learn. Raises ``ValueError`` when a count is missing
    or negative.
    """
    zero_division = _check_zero_division(zero_division)
    missing = [key for key in _COUNT_KEYS if key not in counts]
    if missing:
        raise ValueError(
            f"per-category counts need the keys 'tp', 'fp' and 'fn'; missing {missing} "
            f"in {dict(counts)!r}"
        )
    tp, fp, fn = (_count(counts[key], f"count {key!r}") for key in _COUNT_KEYS)
    denominator = 2 * tp + fp + fn
    if denominator == 0:
        return zero_division
    return 2 * tp / denominator


def macro_f1(
    per_category: Mapping[Any, Mapping[str, int]] | Sequence[Mapping[str, int]],
    zero_division: float = 0.0,
) -> float:
    """Unweighted mean of :func:`category_f1` over every category given.

    ``per_category`` is a mapping ``category -> counts`` (as returned by
    :func:`confusion_matrix_from_counts`) or a sequence of counts (as returned by
    :func:`counts_from_confusion_matrix`). Categories absent from both truth and predictions
    count as ``zero_division``; with ``zero_division=nan`` they are left out of the mean (and
    the result is nan when every category is). Raises ``ValueError`` when no category is given.
    """
    zero_division = _check_zero_division(zero_division)
    items = list(per_category.values()) if isinstance(per_category, Mapping) else list(per_category)
    if not items:
        raise ValueError("macro_f1 needs the counts of at least one category, got none")
    scores = [category_f1(counts, zero_division) for counts in items]
    defined = [score for score in scores if not math.isnan(score)]
    if not defined:
        return math.nan
    return math.fsum(defined) / len(defined)


def accuracy_from_confusion_matrix(matrix: Sequence[Sequence[int]]) -> float:
    """Fraction of samples on the diagonal (correctly classified).

    Raises ``ValueError`` on an invalid matrix or one that counts no sample (accuracy is then
    undefined, and scikit-learn refuses empty inputs too).
    """
    checked = _check_matrix(matrix)
    total = sum(map(sum, checked))
    if total == 0:
        raise ValueError("accuracy is undefined for a confusion matrix that counts no sample")
    return sum(checked[c][c] for c in range(len(checked))) / total
