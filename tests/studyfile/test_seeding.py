"""``study.enqueue`` and ``study.warm_start``: read and checked against the search space."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dvt_hpo.spec.model import WarmStartSpec
from dvt_hpo.studyfile import load_spec, spec_to_dict
from tests.studyfile.helpers import BASE, bad_file_test, case

SPACE = """\
  - {name: width, path: model.kwargs.width, kind: categorical, choices: [16, 32, 64]}
  - {name: depth, path: model.kwargs.depth, kind: int, low: 1, high: 4, step: 1}
"""


def seeded(*lines: str) -> str:
    """BASE with three dimensions (lr, width, depth) and ``lines`` in ``study:`` (line 3 on)."""
    text = BASE.replace("  name: s\n", "  name: s\n" + "".join(f"{x}\n" for x in lines))
    return text + SPACE


def test_enqueue_entries_are_kept_partial(write: Callable[..., Path]) -> None:
    spec = load_spec(write(seeded("  enqueue: [{lr: 0.001, width: 64}, {depth: 2}]")))
    # A partial entry: the sampler draws the rest (Optuna's enqueue_trial).
    assert spec.study.enqueue == ({"lr": 0.001, "width": 64}, {"depth": 2})


def test_warm_start_defaults_to_this_storage_and_hides_its_password(
    write: Callable[..., Path],
) -> None:
    spec = load_spec(write(seeded("  warm_start: {study: last-week, top: 3}")))
    assert spec.study.warm_start == WarmStartSpec("last-week", spec.study.storage, 3, False)
    other = load_spec(
        write(
            seeded(
                "  warm_start: {study: old, storage: 'postgresql://u:hunter2@db/x', "
                "copy_results: true}"
            )
        )
    )
    assert other.study.warm_start is not None and other.study.warm_start.copy_results
    assert "hunter2" not in str(spec_to_dict(other))


test_bad_seeding = bad_file_test(
    [
        case(
            "out-of-range",
            seeded("  enqueue:", "    - {lr: 0.001}", "    - {lr: 0.5, width: 64}"),
            5,
            "study.enqueue[1].lr",
            "entry 1: lr must be in [0.0001, 0.1]",
            "0.5",
        ),
        case(
            "not-a-choice",
            seeded("  enqueue: [{width: 48}]"),
            3,
            "study.enqueue[0].width",
            "one of the choices [16, 32, 64]",
        ),
        case(
            "not-an-int",
            seeded("  enqueue: [{depth: 2.5}]"),
            3,
            "study.enqueue[0].depth",
            "an integer",
        ),
        case(
            "unknown-name",
            seeded("  enqueue: [{widht: 32}]"),
            3,
            "study.enqueue[0].widht",
            "not a search_space name",
            "width",
        ),
        case("not-a-list", seeded("  enqueue: {lr: 0.1}"), 3, "study.enqueue", "list of configs"),
        case(
            "repeated",
            seeded("  enqueue: [{depth: 2}, {depth: 2}]"),
            3,
            "study.enqueue[1]",
            "repeats",
        ),
        case(
            "itself",
            seeded("  warm_start: {study: s}"),
            3,
            "study.warm_start.study",
            "earlier, other study",
        ),
        case("top-zero", seeded("  warm_start: {study: a, top: 0}"), 3, "study.warm_start.top"),
    ]
)
