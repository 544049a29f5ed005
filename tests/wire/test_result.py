"""The trial result file: typed, checked on read, written atomically."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dvt_hpo.wire.result import ResultError, TrialResult, read_result


def test_a_result_round_trips_through_its_file(tmp_path: Path) -> None:
    result = TrialResult("ok", metrics={"f1": 0.5}, rank=0, host="h", time_unix=1.5)
    result.write(tmp_path / "result.json")
    assert read_result(tmp_path / "result.json") == result


def test_no_file_is_no_result(tmp_path: Path) -> None:
    assert read_result(tmp_path / "result.json") is None


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"status": "finished"}, r"status: expected one of 'ok', 'pruned'"),
        ({"status": "ok", "metrics": {"f1": "high"}}, r"metrics.f1: expected float"),
        ({"status": "ok", "colour": 1}, r"unknown key 'colour'"),
        ({}, r"missing required key 'status'"),
    ],
)
def test_a_file_that_is_not_a_result_is_refused_with_the_field(
    tmp_path: Path, data: object, error: str
) -> None:
    (tmp_path / "result.json").write_text(json.dumps(data))
    with pytest.raises(ResultError, match=error):
        read_result(tmp_path / "result.json")
