"""The ``batch_size`` section's dataclass: its defaults are a search that is off, every field is
explained for the generated reference, and its value rules refuse what a search cannot use."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from dvt_hpo.batch.spec import BatchSizeSpec
from dvt_hpo.config.schema import field_doc, read_fields
from dvt_hpo.exceptions import SpecError


def test_the_defaults_are_a_search_that_is_off() -> None:
    spec = BatchSizeSpec()
    assert not spec.auto
    assert (spec.min, spec.max, spec.start, spec.multiple_of) == (1, 1024, None, 1)
    assert spec.path == "data.batch_size" and spec.effective is None
    assert spec.memory_keys == ()


def test_every_field_has_its_sentence() -> None:
    missing = [f.name for f in dataclasses.fields(BatchSizeSpec) if field_doc(f) is None]
    assert missing == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("min", 0),
        ("max", 0),
        ("start", 0),
        ("multiple_of", 0),
        ("tolerance", 0),
        ("tolerance", 0.6),
    ],
)
def test_values_out_of_their_bounds_are_refused_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(SpecError, match=rf"batch_size\.{field}"):
        read_fields(BatchSizeSpec, {field: value}, source="s.yaml", path="batch_size")


@pytest.mark.processes
def test_it_is_stdlib_only_so_the_trial_process_reads_it_without_optuna_or_yaml() -> None:
    code = (
        "import sys, dvt_hpo.batch.spec; "
        "print(sorted(m for m in ('optuna', 'yaml', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
