"""The exceptions a user meets: where a bad input is, a storage problem as one redacted line,
and a trial's stop that an ``except Exception`` cannot swallow."""

from __future__ import annotations

import pytest

from dvt_hpo.exceptions import (
    DvtHpoError,
    SpecError,
    StorageError,
    StudyNotFoundError,
    TrialPruned,
    TrialStopped,
    one_line,
)


@pytest.mark.parametrize(
    ("where", "shown"),
    [
        (
            {"file": "study.yaml", "line": 4, "field": "study.n_trials"},
            "study.yaml:4: study.n_trials: bad",
        ),
        ({"file": "study.yaml", "field": "study.n_trials"}, "study.yaml: study.n_trials: bad"),
        ({"field": "--set study.n_trials"}, "--set study.n_trials: bad"),
        ({"file": "study.yaml", "line": 4}, "study.yaml:4: bad"),
        ({}, "bad"),
    ],
)
def test_a_spec_error_says_where_first(where: dict[str, object], shown: str) -> None:
    error = SpecError("bad", **where)  # type: ignore[arg-type]
    assert str(error) == shown and error.message == "bad"
    assert isinstance(error, DvtHpoError)


def test_a_storage_error_is_one_line_with_the_url_redacted() -> None:
    url = "postgresql://alice:s3cret@db/hpo"
    error = StorageError(
        "connection refused for s3cret.\nDETAIL: more lines",
        url=url,
        hint="is it up?",
        source="s.yaml",
    )
    assert str(error) == (
        "s.yaml: study.storage 'postgresql://alice:***@db/hpo': connection refused for ***; is it up?"
    )
    assert isinstance(StudyNotFoundError("no study", url="sqlite:///x.db"), StorageError)


def test_a_stop_is_not_an_exception_a_training_loop_catches() -> None:
    with pytest.raises(TrialStopped, match="trial stopped by SIGINT"):
        try:
            raise TrialStopped("SIGINT")
        except Exception:  # what a training loop may write
            pytest.fail("TrialStopped was caught as an Exception")
    assert str(TrialPruned(3)) == "trial pruned at step 3" and TrialPruned(3).step == 3


def test_one_line_is_the_first_line_that_says_something() -> None:
    assert one_line("\n  \n  first line.\nsecond") == "first line"
    assert one_line("") == ""
