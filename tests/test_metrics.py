"""dvt_hpo.metrics against scikit-learn on many random label sets, plus its input checks."""

from __future__ import annotations

import math
import random
import subprocess
import sys
import warnings

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score
from sklearn.metrics import confusion_matrix as sk_confusion_matrix

from dvt_hpo.metrics import (
    accuracy_from_confusion_matrix,
    category_f1,
    confusion_matrix,
    confusion_matrix_from_counts,
    counts_from_confusion_matrix,
    macro_f1,
)

ZERO_DIVISIONS = [0.0, 1.0, math.nan]


def _random_labels(rng: random.Random) -> tuple[list[int], list[int], int]:
    """Labels where some classes are missing from the truth, the predictions, or both."""
    num_classes = rng.randint(1, 8)
    true_classes = rng.sample(range(num_classes), rng.randint(1, num_classes))
    pred_classes = rng.sample(range(num_classes), rng.randint(1, num_classes))
    n = rng.randint(1, 40)
    y_true = [rng.choice(true_classes) for _ in range(n)]
    # Mostly right, so per-class F1 values spread over (0, 1) rather than sit at 0.
    y_pred = [
        t if rng.random() < 0.5 and t in pred_classes else rng.choice(pred_classes) for t in y_true
    ]
    return y_true, y_pred, num_classes


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-12)


@pytest.fixture
def label_sets() -> list[tuple[list[int], list[int], int]]:
    rng = random.Random(20240611)
    sets = [_random_labels(rng) for _ in range(400)]
    # Edge cases: one class; a class in neither sequence; everything wrong; everything right.
    sets += [
        ([0, 0, 0], [0, 0, 0], 1),
        ([0, 1], [1, 0], 3),
        ([2, 2], [0, 1], 3),
        ([1, 2], [1, 2], 4),
    ]
    return sets


def test_macro_and_per_class_f1_match_sklearn(label_sets) -> None:
    absent_everywhere = 0
    for y_true, y_pred, k in label_sets:
        matrix = confusion_matrix(y_true, y_pred, k)
        from_matrix = counts_from_confusion_matrix(matrix)
        from_labels = confusion_matrix_from_counts(y_true, y_pred, categories=range(k))
        absent_everywhere += sum(2 * c["tp"] + c["fp"] + c["fn"] == 0 for c in from_matrix)
        for zero_division in ZERO_DIVISIONS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                expected_macro = f1_score(
                    y_true, y_pred, labels=range(k), average="macro", zero_division=zero_division
                )
                expected_per_class = f1_score(
                    y_true, y_pred, labels=range(k), average=None, zero_division=zero_division
                )
            for counts in (from_matrix, from_labels):
                assert _same(macro_f1(counts, zero_division), float(expected_macro)), (
                    y_true,
                    y_pred,
                    k,
                    zero_division,
                )
            for c in range(k):
                got = category_f1(from_matrix[c], zero_division)
                assert _same(got, float(expected_per_class[c])), (y_true, y_pred, k, c)
                assert _same(category_f1(from_labels[c], zero_division), got)
    # The comparison above is only meaningful if it covered the contested case.
    assert absent_everywhere > 20


# sklearn warns about single-label inputs even when labels= is given.
@pytest.mark.filterwarnings("ignore:A single label was found:UserWarning")
def test_confusion_matrix_and_accuracy_match_sklearn(label_sets) -> None:
    for y_true, y_pred, k in label_sets:
        matrix = confusion_matrix(y_true, y_pred, k)
        assert matrix == sk_confusion_matrix(y_true, y_pred, labels=range(k)).tolist()
        assert accuracy_from_confusion_matrix(matrix) == pytest.approx(
            accuracy_score(y_true, y_pred)
        )


def test_counts_and_matrix_round_trip(label_sets) -> None:
    for y_true, y_pred, k in label_sets:
        from_matrix = counts_from_confusion_matrix(confusion_matrix(y_true, y_pred, k))
        from_labels = confusion_matrix_from_counts(y_true, y_pred, categories=range(k))
        assert list(from_labels) == list(range(k))
        assert list(from_labels.values()) == from_matrix
        n = len(y_true)
        assert sum(c["tp"] + c["fn"] for c in from_matrix) == n  # every sample has one truth
        assert sum(c["tp"] + c["fp"] for c in from_matrix) == n  # ... and one prediction


def test_absent_class_counts_as_zero_division() -> None:
    # Class 2 is neither true nor predicted: F1 = zero_division, and it is in the average.
    counts = confusion_matrix_from_counts([0, 1, 1], [0, 1, 0], categories=range(3))
    assert counts[2] == {"tp": 0, "fp": 0, "fn": 0}
    assert macro_f1(counts) == pytest.approx((2 / 3 + 2 / 3 + 0) / 3)
    assert macro_f1(counts, zero_division=1.0) == pytest.approx((2 / 3 + 2 / 3 + 1) / 3)
    assert macro_f1(counts, zero_division=math.nan) == pytest.approx(2 / 3)
    # A class only predicted, or only true, scores 0 whatever zero_division says.
    assert category_f1({"tp": 0, "fp": 3, "fn": 0}, zero_division=1.0) == 0.0
    assert category_f1({"tp": 0, "fp": 0, "fn": 2}, zero_division=1.0) == 0.0
    assert math.isnan(macro_f1([{"tp": 0, "fp": 0, "fn": 0}], zero_division=math.nan))


def test_named_labels_default_to_sorted_union() -> None:
    y_true = ["dog", "cat", "cat", "bird", "dog"]
    y_pred = ["dog", "cat", "dog", "cat", "fish"]
    counts = confusion_matrix_from_counts(y_true, y_pred)
    assert list(counts) == ["bird", "cat", "dog", "fish"]
    assert counts["cat"] == {"tp": 1, "fp": 1, "fn": 1}
    expected = f1_score(y_true, y_pred, average="macro", zero_division=0)
    assert macro_f1(counts) == pytest.approx(expected)


def test_unsortable_labels_keep_first_appearance_order() -> None:
    counts = confusion_matrix_from_counts([1, "a", None], [1, "a", 1])
    assert list(counts) == [1, "a", None]
    assert counts[None] == {"tp": 0, "fp": 0, "fn": 1}


def test_numpy_labels_and_counts_are_accepted() -> None:
    y_true, y_pred = np.array([0, 1, 2, 2]), np.array([0, 2, 2, 1])
    matrix = confusion_matrix(y_true, y_pred, 3)
    assert matrix == [[1, 0, 0], [0, 0, 1], [0, 1, 1]]
    assert category_f1({"tp": np.int64(2), "fp": np.int32(1), "fn": 0}) == pytest.approx(0.8)


def test_mapping_and_sequence_give_the_same_macro_f1() -> None:
    per_class = [
        {"tp": 3, "fp": 1, "fn": 2},
        {"tp": 0, "fp": 1, "fn": 0},
        {"tp": 5, "fp": 0, "fn": 0},
    ]
    expected = (6 / 9 + 0 + 1) / 3
    assert macro_f1(per_class) == pytest.approx(expected)
    assert macro_f1(dict(zip("abc", per_class, strict=True))) == pytest.approx(expected)
    # Extra keys (a 'tn' count, a support) are ignored.
    assert category_f1({"tp": 3, "fp": 1, "fn": 2, "tn": 99}) == pytest.approx(6 / 9)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: category_f1({"tp": 1, "fp": -1, "fn": 0}),
            "count 'fp' must be a non-negative integer, got -1",
        ),
        (lambda: category_f1({"tp": 1, "fn": 0}), r"missing \['fp'\]"),
        (
            lambda: category_f1({"tp": 1.5, "fp": 0, "fn": 0}),
            "count 'tp' must be a non-negative integer, got 1.5",
        ),
        (lambda: category_f1({"tp": True, "fp": 0, "fn": 0}), "got the bool True"),
        (
            lambda: category_f1({"tp": 1, "fp": 0, "fn": 0}, zero_division=2),
            "zero_division must be",
        ),
        (lambda: macro_f1([]), "at least one category"),
        (lambda: macro_f1({0: {"tp": 1, "fp": 0, "fn": -3}}), "got -3"),
        (lambda: counts_from_confusion_matrix([[1, 2], [3]]), "row 1 has 1 entries, expected 2"),
        (
            lambda: counts_from_confusion_matrix([[1, 2, 3], [4, 5, 6]]),
            "row 0 has 3 entries, expected 2",
        ),
        (lambda: counts_from_confusion_matrix([]), "empty matrix"),
        (
            lambda: counts_from_confusion_matrix([[1, -2], [0, 0]]),
            r"entry \[0\]\[1\] must be a non-negative integer, got -2",
        ),
        (lambda: accuracy_from_confusion_matrix([[0, 0], [0, 0]]), "counts no sample"),
        (lambda: accuracy_from_confusion_matrix([[1, 2], [3]]), "must be square"),
        (lambda: confusion_matrix([0, 1], [0], 2), "same length, got 2 and 1"),
        (
            lambda: confusion_matrix([0, 3], [0, 1], 3),
            r"y_true\[1\] must be a class index in \[0, 3\), got 3",
        ),
        (
            lambda: confusion_matrix([0, 1], [0, -1], 3),
            r"y_pred\[1\] must be a class index in \[0, 3\), got -1",
        ),
        (lambda: confusion_matrix([0.0], [0], 3), r"y_true\[0\] must be a class index"),
        (lambda: confusion_matrix([], [], 0), "num_classes must be at least 1, got 0"),
        (
            lambda: confusion_matrix_from_counts([0, 5], [0, 1], categories=range(3)),
            r"y_true\[1\] = 5 is not one of the categories",
        ),
        (lambda: confusion_matrix_from_counts([0], [0], categories=[]), "at least one category"),
    ],
)
def test_bad_input_raises_value_error(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_imports_only_the_standard_library() -> None:
    code = (
        "import sys, dvt_hpo.metrics\n"
        "heavy = sorted({'numpy', 'torch', 'sklearn'} & set(sys.modules))\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
