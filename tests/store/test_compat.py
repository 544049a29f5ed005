"""A study file against the stored study: what refuses the run, what only informs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from dvt_hpo.store.compat import ATTR_PREFIX, compare, refusal_error, settings_attrs, system_attrs
from dvt_hpo.store.opening import StoredStudy
from dvt_hpo.studyfile import StudySpec, load_spec
from tests.conftest import toy_study

WHERE = "sqlite:///x.db"


@pytest.fixture
def spec_of(tmp_path: Path) -> Callable[..., StudySpec]:
    def make(overrides: tuple[str, ...] = (), **sections: Any) -> StudySpec:
        path = tmp_path / "study.yaml"
        path.write_text(yaml.safe_dump(toy_study("c", **sections), sort_keys=False))
        return load_spec(path, list(overrides))

    return make


def stored_from(spec: StudySpec, **attrs: Any) -> StoredStudy:
    """The study as a run of ``spec`` stored it, with ``attrs`` replaced."""
    user_attrs = settings_attrs(spec)
    for key, value in attrs.items():
        if value is None:
            user_attrs.pop(ATTR_PREFIX + key)
        else:
            user_attrs[ATTR_PREFIX + key] = value
    return StoredStudy("c", spec.objective.direction, user_attrs, n_trials=3)


def test_same_spec_fits(spec_of: Callable[..., StudySpec]) -> None:
    spec = spec_of()
    comparison = compare(spec, stored_from(spec))
    assert comparison.ok and comparison.notes == () and comparison.space_changes == ()
    assert refusal_error(spec, comparison, WHERE) is None


def test_metric_reduce_and_direction_changes_are_all_listed(
    spec_of: Callable[..., StudySpec],
) -> None:
    old = spec_of()
    new = spec_of(objective={"metric": "accuracy", "direction": "minimize", "reduce": "last"})

    comparison = compare(new, stored_from(old))

    assert [d.field for d in comparison.refusals] == [
        "objective.direction",
        "objective.metric",
        "objective.reduce",
    ]
    err = refusal_error(new, comparison, WHERE)
    assert err is not None
    message = str(err)
    assert err.field == "objective.direction" and err.line is not None, message
    for text in ("'maximize' -> 'minimize'", "'score' -> 'accuracy'", "'best' -> 'last'"):
        assert text in message, message
    assert WHERE in message and "another study.name" in message
    assert "--allow-space-change" not in message


def test_metric_change_is_placed_at_its_line(spec_of: Callable[..., StudySpec]) -> None:
    old = spec_of()
    new = spec_of(("objective.metric=accuracy",))
    err = refusal_error(new, compare(new, stored_from(old)), WHERE)
    assert err is not None
    assert (err.file, err.line, err.field) == ("<--set>", None, "objective.metric"), str(err)


def test_space_change_refuses_unless_allowed(spec_of: Callable[..., StudySpec]) -> None:
    old = spec_of()
    space = [{"name": "x", "path": "x", "kind": "float", "low": 0.0, "high": 2.0, "new_key": True}]
    new = spec_of(search_space=space)

    refused = compare(new, stored_from(old))
    assert [(d.field, d.text) for d in refused.refusals] == [("search_space", "x: high 1.0 -> 2.0")]
    err = refusal_error(new, refused, WHERE)
    assert err is not None and "--allow-space-change" in str(err)

    allowed = compare(new, stored_from(old), allow_space_change=True)
    assert allowed.ok and allowed.space_changes == ("x: high 1.0 -> 2.0",)


def test_sampler_and_pruner_changes_only_inform(spec_of: Callable[..., StudySpec]) -> None:
    old = spec_of()
    new = spec_of(study={"sampler": {"kind": "random", "seed": 1}, "pruner": "median"})
    comparison = compare(new, stored_from(old))
    assert comparison.ok
    assert len(comparison.notes) == 2
    assert "study.sampler" in comparison.notes[0] and "'seed': 1" in comparison.notes[0]
    assert "study.pruner" in comparison.notes[1] and "median" in comparison.notes[1]


def test_attrs_a_study_lacks_are_not_compared(spec_of: Callable[..., StudySpec]) -> None:
    new = spec_of(objective={"metric": "accuracy"})
    old = stored_from(new, objective=None, space=None, sampler=None, pruner=None)
    assert compare(new, old).ok


# several objectives and constraints
TWO = {
    "metrics": [
        {"name": "score", "direction": "maximize"},
        {"name": "cost_s", "direction": "minimize"},
    ]
}
LIMIT = [{"metric": "size", "max": 500}]


@pytest.fixture
def objective_of(tmp_path: Path) -> Callable[..., StudySpec]:
    """The toy study with its whole ``objective`` section replaced (default: one metric)."""

    def make(objective: dict[str, Any] | None = None) -> StudySpec:
        doc = toy_study("c")
        if objective is not None:
            doc["objective"] = objective
        path = tmp_path / "study.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return load_spec(path)

    return make


def stored_as_run(spec: StudySpec, n_trials: int = 3) -> StoredStudy:
    """The study exactly as a run of ``spec`` stored it (user and system attrs)."""
    return StoredStudy(
        "c",
        spec.objective.direction,
        settings_attrs(spec),
        n_trials,
        directions=spec.objective.directions,
        system_attrs=system_attrs(spec),
    )


@pytest.mark.parametrize(
    ("new", "field", "text"),
    [
        (
            {"metrics": list(reversed(TWO["metrics"]))},
            "objective.metrics",
            "directions ['maximize', 'minimize'] -> ['minimize', 'maximize']",
        ),
        (
            {"metrics": [TWO["metrics"][0], {"name": "cost_s", "direction": "maximize"}]},
            "objective.metrics",
            "directions ['maximize', 'minimize'] -> ['maximize', 'maximize']",
        ),
        (
            {"metrics": [TWO["metrics"][0], {"name": "latency_s", "direction": "minimize"}]},
            "objective.metrics",
            "objectives ['score', 'cost_s'] -> ['score', 'latency_s']",
        ),
        ({"metrics": TWO["metrics"][:1]}, "objective.metrics", "2 objective(s) -> 1"),
        ({**TWO, "constraints": LIMIT}, "objective.constraints", "constraints none -> size <= 500"),
    ],
)
def test_changed_objectives_are_refused(
    objective_of: Callable[..., StudySpec], new: dict[str, Any], field: str, text: str
) -> None:
    old = objective_of(TWO)
    changed = objective_of(new)
    comparison = compare(changed, stored_as_run(old))
    assert comparison.refusals and {d.field for d in comparison.refusals} == {field}
    assert any(text in d.text for d in comparison.refusals), comparison.refusals
    error = refusal_error(changed, comparison, WHERE)
    assert error is not None and "the objective of a study cannot change" in str(error)


@pytest.mark.parametrize(
    "new",
    [
        [{"metric": "size", "max": 400}],
        [{"metric": "size", "max": 500, "min": 1}],
        [{"metric": "mem", "max": 500}],
        [{"metric": "size", "max": 500}, {"metric": "mem", "max": 1}],
    ],
)
def test_changed_constraints_are_refused(
    objective_of: Callable[..., StudySpec], new: list[dict[str, Any]]
) -> None:
    old = objective_of({**TWO, "constraints": LIMIT})
    changed = objective_of({**TWO, "constraints": new})
    assert compare(old, stored_as_run(old)).ok
    refusals = compare(changed, stored_as_run(old)).refusals
    assert [d.field for d in refusals] == ["objective.constraints"]
    assert refusals[0].text.startswith("constraints size <= 500 -> ")


def test_a_single_objective_study_becoming_multi_objective_is_refused(
    objective_of: Callable[..., StudySpec],
) -> None:
    old = objective_of()
    refusals = compare(objective_of(TWO), stored_from(old)).refusals
    assert [(d.field, d.text) for d in refusals] == [
        (
            "objective.metrics",
            "1 objective(s) -> 2 (a study's number of objectives is fixed when it is created)",
        )
    ]


def test_an_old_study_without_system_attrs_still_resumes(
    objective_of: Callable[..., StudySpec],
) -> None:
    """Created before objectives and constraints were stored: the unchanged file runs on; a
    constraint added to its trials (which had none) is refused."""
    spec = objective_of()
    assert compare(spec, stored_from(spec)).ok
    constrained = objective_of({"metric": "score", "direction": "maximize", "constraints": LIMIT})
    assert [d.field for d in compare(constrained, stored_from(spec)).refusals] == [
        "objective.constraints"
    ]
    # A created but never run study (no trials, no attrs yet) takes the file's constraints.
    empty = StoredStudy("c", "maximize", {}, 0)
    assert compare(constrained, empty).ok
