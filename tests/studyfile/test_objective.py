"""Section objective: the direction rule (a table), the refusal at load, the start-line text."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dvt_hpo.exceptions import SpecError
from dvt_hpo.studyfile import ConstraintSpec, ObjectiveSpec, load_spec
from dvt_hpo.studyfile.objective import describe_objective, infer_direction
from tests.studyfile.helpers import BASE, bad_file_test, case

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
    ("latency_ms", MIN),  # a unit qualifies the word before it
    ("val_time_s", MIN),
    ("epoch_s", REFUSE),  # units and qualifiers only: nothing to decide on
    ("peak_memory_mb", REFUSE),  # 'memory' has no known direction
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


# ---------------------------------------------------------------------------------------------
# several objectives and constraints

# BASE has 6 lines: objective is line 7, metrics 8, its items 9 and 10, constraints 11 and 12.
MULTI = BASE + (
    "objective:\n"
    "  metrics:\n"
    "    - {name: macro_f1}\n"
    "    - {name: latency_ms, direction: minimize}\n"
    "  constraints:\n"
    "    - {metric: n_params, max: 20000}\n"
)
ITEM_2 = "    - {name: latency_ms, direction: minimize}\n"
CONSTRAINT = "    - {metric: n_params, max: 20000}\n"


def multi_with(old: str, new: str) -> str:
    assert old in MULTI
    return MULTI.replace(old, new)


def multi_study(*lines: str) -> str:
    """MULTI with lines inserted into `study:` after the name (from line 3 on)."""
    return MULTI.replace("  name: s\n", "  name: s\n" + "".join(f"{line}\n" for line in lines))


MULTI_BAD = [
    case(
        "ambiguous-direction-of-an-item",
        multi_with(ITEM_2, "    - {name: peak_memory_mb}\n"),
        10,
        "objective.metrics[1].name",
        "'peak_memory_mb'",
        "set objective.metrics[1].direction: minimize or maximize",
    ),
    case(
        "direction-not-a-direction",
        multi_with(ITEM_2, "    - {name: latency_ms, direction: down}\n"),
        10,
        "objective.metrics[1].direction",
        "minimize, maximize",
    ),
    case(
        "duplicate-names",
        multi_with(ITEM_2, "    - {name: macro_f1, direction: maximize}\n"),
        10,
        "objective.metrics[1].name",
        "listed twice",
    ),
    case(
        "item-without-a-name",
        multi_with(ITEM_2, "    - {direction: minimize}\n"),
        10,
        "objective.metrics[1].name",
        "missing required key 'name'",
    ),
    case(
        "unknown-key-in-an-item",
        multi_with(ITEM_2, "    - {name: latency_ms, directon: minimize}\n"),
        10,
        "objective.metrics[1].directon",
        "did you mean 'direction'",
    ),
    case(
        "empty-metrics",
        BASE + "objective:\n  metrics: []\n",
        8,
        "objective.metrics",
        "non-empty list of objectives",
    ),
    case(
        "metric-and-metrics",
        multi_with("  metrics:\n", "  metric: loss\n  metrics:\n"),
        8,
        "objective.metric",
        "mutually exclusive",
    ),
    case(
        "direction-and-metrics",
        multi_with("  metrics:\n", "  direction: maximize\n  metrics:\n"),
        8,
        "objective.direction",
        "mutually exclusive",
        "each with its own name and direction",
    ),
    case(
        "constraint-without-bounds",
        multi_with(CONSTRAINT, "    - {metric: n_params}\n"),
        12,
        "objective.constraints[0]",
        "needs max, min or both",
    ),
    case(
        "constraint-min-above-max",
        multi_with(CONSTRAINT, "    - {metric: n_params, max: 10, min: 20}\n"),
        12,
        "objective.constraints[0].min",
        "greater than max",
    ),
    case(
        "constraint-not-a-number",
        multi_with(CONSTRAINT, "    - {metric: n_params, max: lots}\n"),
        12,
        "objective.constraints[0].max",
        "'lots'",
    ),
    case(
        "constraint-infinite",
        multi_with(CONSTRAINT, "    - {metric: n_params, max: .inf}\n"),
        12,
        "objective.constraints[0].max",
        "must be a number",
    ),
    case(
        "constraint-twice-on-one-metric",
        multi_with(CONSTRAINT, CONSTRAINT + "    - {metric: n_params, min: 10}\n"),
        13,
        "objective.constraints[1].metric",
        "two constraints",
    ),
    case(
        "constraint-without-metric",
        multi_with(CONSTRAINT, "    - {max: 10}\n"),
        12,
        "objective.constraints[0].metric",
        "missing required key 'metric'",
    ),
    case(
        "constraints-not-a-list",
        multi_with("  constraints:\n" + CONSTRAINT, "  constraints: {metric: n_params}\n"),
        11,
        "objective.constraints",
        "non-empty list of constraints",
    ),
    case(
        "pruner-with-several-objectives",
        multi_study("  pruner: median"),
        3,
        "study.pruner",
        "cannot be pruned",
        "Trial.report raises",
        "set it to none",
    ),
    case(
        "pruner-kind-with-several-objectives",
        multi_study("  pruner: {kind: hyperband, min_resource: 1}"),
        3,
        "study.pruner.kind",
        "cannot be pruned",
    ),
    case(
        "single-objective-sampler",
        multi_study("  sampler: {kind: cmaes, seed: 0}"),
        3,
        "study.sampler.kind",
        "'cmaes' supports one objective only",
        "nsga2",
    ),
]


test_bad_multi_objective_input = bad_file_test(MULTI_BAD)


def test_several_objectives_default_to_nsga2_and_no_pruner(write: Callable[..., Path]) -> None:
    spec = load_spec(write(MULTI))
    objective = spec.objective
    assert objective.is_multi
    assert objective.names == ("macro_f1", "latency_ms")
    assert objective.directions == ("maximize", "minimize")
    assert objective.reduce == "best"
    assert objective.constraints == (ConstraintSpec("n_params", max=20000.0),)
    assert (spec.study.sampler.kind, spec.study.pruner.kind) == ("nsga2", "none")


@pytest.mark.parametrize("sampler", ["tpe", "random", "nsga3", "qmc", "nsga2"])
@pytest.mark.parametrize("pruner", ["none", "null", "{kind: none}"])
def test_multi_objective_samplers_and_an_explicit_no_pruner(
    write: Callable[..., Path], sampler: str, pruner: str
) -> None:
    spec = load_spec(write(multi_study(f"  sampler: {sampler}", f"  pruner: {pruner}")))
    assert (spec.study.sampler.kind, spec.study.pruner.kind) == (sampler, "none")


def test_one_item_metrics_is_a_single_objective_study(write: Callable[..., Path]) -> None:
    one = load_spec(write(BASE + "objective:\n  metrics: [{name: val_loss}]\n"))
    plain = load_spec(write(BASE + "objective: {metric: val_loss}\n", "plain.yaml"))
    assert not one.objective.is_multi
    assert (one.objective.metric, one.objective.direction) == ("val_loss", "minimize")
    assert one.objective.names == plain.objective.names == ("val_loss",)
    assert one.study.sampler == plain.study.sampler and one.study.pruner == plain.study.pruner
    # A single objective can be pruned (BASE's 1 epoch gets the short curves' default, no
    # pruner; a longer training gets the Wilcoxon test).
    longer = BASE.replace("config: {epochs: 1}", "config: {epochs: 30}")
    one = load_spec(write(longer + "objective:\n  metrics: [{name: val_loss}]\n", "long.yaml"))
    assert one.study.pruner.kind == "wilcoxon"


def test_constraints_on_a_single_objective(write: Callable[..., Path]) -> None:
    spec = load_spec(
        write(
            BASE + "objective:\n  metric: macro_f1\n  constraints: [{metric: mb, min: 1, max: 8}]\n"
        )
    )
    assert spec.objective.constraints == (ConstraintSpec("mb", max=8.0, min=1.0),)
    assert describe_objective(spec.objective) == (
        "maximize macro_f1 (best of epochs), subject to 1 <= mb <= 8"
    )


def test_start_line_text_of_several_objectives(write: Callable[..., Path]) -> None:
    spec = load_spec(write(MULTI, "m.yaml"))
    assert describe_objective(spec.objective) == (
        "maximize macro_f1, minimize latency_ms (the epoch best on macro_f1), "
        "subject to n_params <= 20000"
    )
    last = load_spec(write(MULTI.replace("  metrics:\n", "  reduce: last\n  metrics:\n")))
    assert "(last epoch)" in describe_objective(last.objective)
