"""A study file against the stored study: what refuses the run, what only informs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from dvt_hpo.compat import ATTR_PREFIX, compare, refusal_error, settings_attrs
from dvt_hpo.spec import StudySpec, load_spec
from dvt_hpo.stored_study import StoredStudy
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
    space = [{"name": "x", "path": "x", "kind": "float", "low": 0.0, "high": 2.0}]
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
