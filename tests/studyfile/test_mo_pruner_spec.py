"""``study.pruner: {kind: mo_asha}`` in the study file: accepted with several objectives (and
the example study loads), refused at its line where it cannot apply, and pruners for one
objective still refused with several."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dvt_hpo.studyfile import load_spec
from tests.conftest import REPO_ROOT
from tests.studyfile.helpers import BASE, DIM_LINE, bad_file_test, case
from tests.studyfile.test_objective import ITEM_2, multi_study

EXAMPLE = REPO_ROOT / "studies" / "multi-objective-pruned.yaml"


def single_study(line: str) -> str:
    return BASE.replace("  name: s\n", f"  name: s\n{line}\n") + "objective: {metric: loss}\n"


BAD = [
    case(
        "mo-asha-with-one-objective",
        single_study("  pruner: mo_asha"),
        3,
        "study.pruner",
        "pruner kind 'mo_asha' prunes studies with several objectives",
        "this study has one",
        "list several under objective.metrics",
        "wilcoxon",
    ),
    case(
        "mo-asha-kind-with-one-objective",
        single_study("  pruner: {kind: mo_asha, reduction_factor: 2}"),
        3,
        "study.pruner.kind",
        "prunes studies with several objectives",
    ),
    case(
        "mo-asha-unknown-argument",
        multi_study("  pruner: {kind: mo_asha, eta: 3}"),
        3,
        "study.pruner.eta",
        "unknown argument 'eta' for MOASHAPruner",
        "reduction_factor",
        "min_resource",
    ),
    case(
        "mo-asha-argument-of-the-wrong-type",
        multi_study("  pruner: {kind: mo_asha, min_resource: one}"),
        3,
        "study.pruner.min_resource",
        "takes int",
        "'one'",
    ),
    case(
        "mo-asha-reduction-factor-one",
        multi_study("  pruner: {kind: mo_asha, reduction_factor: 1}"),
        3,
        "study.pruner",
        "MOASHAPruner rejects the arguments: reduction_factor must be > 1, got 1",
    ),
    case(
        "mo-asha-with-a-direction-it-cannot-read",
        multi_study("  pruner: mo_asha").replace(ITEM_2, "    - {name: peak_memory_mb}\n"),
        11,
        "objective.metrics[1].name",
        "cannot tell whether 'peak_memory_mb' is to be minimized or maximized",
        "objective.metrics[1].direction",
    ),
    case(
        "single-objective-pruner-with-several-names-mo-asha",
        multi_study("  pruner: {kind: successive_halving}"),
        3,
        "study.pruner.kind",
        "cannot be pruned by a pruner for one objective",
        "'mo_asha'",
        "set it to none",
    ),
]

test_mo_asha_is_refused_where_it_cannot_apply = bad_file_test(BAD)


@pytest.mark.parametrize(
    ("line", "kwargs"),
    [
        # A tenth of BASE's 1 epoch (at least 1); no rung at its last step.
        ("  pruner: mo_asha", {"min_resource": 1, "max_resource": 1}),
        (
            "  pruner: {kind: mo_asha, min_resource: 2, reduction_factor: 2, min_trials: 3}",
            {"min_resource": 2, "reduction_factor": 2, "min_trials": 3, "max_resource": 1},
        ),
    ],
)
def test_mo_asha_with_several_objectives(
    write: Callable[..., Path], line: str, kwargs: dict[str, int]
) -> None:
    spec = load_spec(write(multi_study(line)))
    assert (spec.study.pruner.kind, spec.study.pruner.kwargs) == ("mo_asha", kwargs)
    assert spec.objective.is_multi


def test_the_example_study_loads() -> None:
    spec = load_spec(EXAMPLE)
    assert spec.objective.names == ("macro_f1", "latency_ms")
    assert spec.objective.directions == ("maximize", "minimize")
    assert spec.study.pruner.kind == "mo_asha"
    assert spec.study.pruner.kwargs == {"min_resource": 1, "reduction_factor": 3, "max_resource": 3}


@pytest.mark.parametrize(
    ("config", "search", "pruner", "first", "last"),
    [
        ("{epochs: 52}", "", "mo_asha", 5, 51),
        ("{epochs: 9}", "", "mo_asha", 1, 8),
        ("{epochs: 52}", "", "{kind: mo_asha, min_resource: 2, max_resource: 40}", 2, 40),
        (
            "{epochs: 10}",
            "  - {name: epochs, path: epochs, kind: int, low: 5, high: 30}\n",
            "{kind: mo_asha, reduction_factor: 2}",
            3,
            29,
        ),
        ("{seed: 0}", "", "mo_asha", 1, 9),  # the built-in trainer's default: 10 epochs
        (  # a trainer whose epochs the file does not tell
            "{optim: {optim_args: {lr: 0.1}}}\n  entrypoint: tests.entrypoints.toy:run",
            "",
            "mo_asha",
            1,
            None,
        ),
    ],
)
def test_the_rungs_follow_the_epochs(
    write: Callable[..., Path], config: str, search: str, pruner: str, first: int, last: int | None
) -> None:
    text = multi_study(f"  pruner: {pruner}").replace("config: {epochs: 1}", f"config: {config}")
    spec = load_spec(write(text.replace(DIM_LINE + "\n", DIM_LINE + "\n" + search)))
    assert spec.study.pruner.kwargs["min_resource"] == first
    assert spec.study.pruner.kwargs.get("max_resource") == last
