"""The wording every bad-input message shares: a value shown with its type, and did-you-mean."""

from __future__ import annotations

import pytest

from dvt_hpo.config.hints import closest, describe, did_you_mean


@pytest.mark.parametrize(
    ("value", "shown"),
    [(None, "null"), ("ten", "'ten' (str)"), ([2, 3], "[2, 3] (list)"), (True, "True (bool)")],
)
def test_a_value_is_shown_with_its_type(value: object, shown: str) -> None:
    assert describe(value) == shown


def test_a_long_value_is_cut_to_80_characters() -> None:
    shown = describe("x" * 200)
    assert shown.endswith("... (str)") and len(shown) == 80 + len(" (str)")


def test_did_you_mean_names_the_closest_option_only_when_one_is_close() -> None:
    options = ["maximize", "minimize"]
    assert closest("maximise", options) == "maximize"
    assert did_you_mean("maximise", options) == "; did you mean 'maximize'?"
    assert closest("sideways", options) is None and did_you_mean("sideways", options) == ""
    assert closest("3", [1, 2, 3]) == "3"  # options of any type, compared as text
