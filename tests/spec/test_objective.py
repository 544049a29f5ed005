"""Section objective: the direction rule (a table), the refusal at load, the start-line text."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dvt_hpo.exceptions import SpecError
from dvt_hpo.spec import ObjectiveSpec, load_spec
from dvt_hpo.spec.objective import describe_objective, infer_direction
from tests.spec.helpers import BASE

MIN, MAX, REFUSE = "minimize", "maximize", None

DIRECTIONS = [
    # lower is better, with and without split prefixes
    ("loss", MIN),
    ("val_loss", MIN),
    ("train_loss", MIN),
    ("val_mse", MIN),
    ("test_rmse", MIN),
    ("eval/nll", MIN),
    ("valid/perplexity", MIN),
    ("ppl", MIN),
    ("error_rate", MIN),
    ("word_error_rate", MIN),
    ("val_wer", MIN),
    ("cer", MIN),
    ("latency_ms", REFUSE),  # 'ms' is not a known word: refuse rather than guess
    ("latency", MIN),
    ("box_loss", MIN),
    ("cross_entropy", MIN),
    ("valLoss", MIN),
    ("mean_squared_error", MIN),
    # higher is better
    ("accuracy", MAX),
    ("val_acc", MAX),
    ("top1_acc", MAX),
    ("macro_f1", MAX),
    ("valid/f1/macro", MAX),
    ("f1_score", MAX),
    ("precision_at_5", MAX),
    ("recall", MAX),
    ("roc_auc", MAX),
    ("mAP", MAX),
    ("map_50", MAX),
    ("test/miou", MAX),
    ("mean_iou", MAX),
    ("dice", MAX),
    ("bleu", MAX),
    ("r2", MAX),
    ("r2_score", MAX),
    ("balanced_accuracy", MAX),
    # both ways, nowhere, or turned around: refused
    ("score", REFUSE),
    ("val_score", REFUSE),
    ("objective", REFUSE),
    ("reward_std", REFUSE),
    ("loss_ratio", REFUSE),
    ("time_to_accuracy", REFUSE),
    ("accuracy_loss", REFUSE),
    ("accuracy_drop", REFUSE),
    ("drop_in_accuracy", REFUSE),
    ("neg_mean_squared_error", REFUSE),
    ("generalization_gap", REFUSE),
    ("delta_f1", REFUSE),
    ("my_metric", REFUSE),
    ("", REFUSE),
]


@pytest.mark.parametrize(("metric", "direction"), DIRECTIONS)
def test_direction_rule(metric: str, direction: str | None) -> None:
    inferred = infer_direction(metric)
    assert inferred.direction == direction, inferred.reason
    assert inferred.reason


@pytest.mark.parametrize(
    ("metric", "direction"), [(m, d) for m, d in DIRECTIONS if m and d is not None]
)
def test_loader_infers_the_direction(
    write: Callable[..., Path], metric: str, direction: str
) -> None:
    spec = load_spec(write(BASE + f"objective: {{metric: {metric!r}}}\n"))
    assert spec.objective.direction == direction


@pytest.mark.parametrize(
    ("metric", "reason"),
    [
        ("val_mse_gap", "'gap'"),
        ("time_to_accuracy", "'time' points to minimize"),
        ("score", "no word"),
        ("my_metric", "'my'"),
    ],
)
def test_ambiguous_metric_is_refused_at_its_line(
    write: Callable[..., Path], metric: str, reason: str
) -> None:
    # BASE has 6 lines: objective is line 7, its metric line 8.
    path = write(BASE + f"objective:\n  metric: {metric}\n  reduce: last\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    err = info.value
    assert (err.file, err.line, err.field) == (str(path), 8, "objective.metric"), str(err)
    assert f"{metric!r}" in err.message and "objective.direction" in err.message, str(err)
    assert reason in err.message, str(err)


def test_maximized_mse_is_not_inferred(write: Callable[..., Path]) -> None:
    """The reproduced bug: `val_mse` became "maximize val_mse"."""
    spec = load_spec(write(BASE + "objective: {metric: val_mse}\n"))
    assert spec.objective.direction == "minimize"


def test_explicit_direction_needs_no_inference(write: Callable[..., Path]) -> None:
    spec = load_spec(write(BASE + "objective: {metric: score, direction: maximize}\n"))
    assert (spec.objective.metric, spec.objective.direction) == ("score", "maximize")


def test_direction_from_an_override(write: Callable[..., Path]) -> None:
    path = write(BASE + "objective: {metric: score}\n")
    with pytest.raises(SpecError):
        load_spec(path)
    spec = load_spec(path, ["objective.direction=minimize"])
    assert spec.objective.direction == "minimize"


@pytest.mark.parametrize(
    ("objective", "text"),
    [
        (ObjectiveSpec("macro_f1", "maximize", "best"), "maximize macro_f1 (best of epochs)"),
        (ObjectiveSpec("val_mse", "minimize", "last"), "minimize val_mse (last epoch)"),
    ],
)
def test_start_line_text(objective: ObjectiveSpec, text: str) -> None:
    assert describe_objective(objective) == text
