"""The spec dataclasses: stdlib only, described once for the schema engine."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from dvt_hpo.config import schema
from dvt_hpo.exceptions import SpecError
from dvt_hpo.spec import model
from tests.conftest import REPO_ROOT


@pytest.mark.processes
def test_model_imports_neither_optuna_nor_yaml() -> None:
    code = (
        "import sys\n"
        "from dvt_hpo.spec.model import BatchSizeSpec\n"
        "from dvt_hpo.studyfile import StudySpec, BUILTIN_ENTRYPOINT\n"
        "heavy = sorted(m for m in ('optuna', 'yaml', 'torch') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO_ROOT, timeout=60)


def test_every_section_field_is_described_for_the_engine() -> None:
    sections = (
        model.StudySection,
        model.ObjectiveSpec,
        model.TrialsSpec,
        model.BatchSizeSpec,
        model.TrainerSpec,
        model.Dimension,
        model.MlflowSpec,
        model.TrackingSpec,
    )
    for cls in sections:
        for f in dataclasses.fields(cls):
            assert isinstance(f.metadata.get("rule"), schema.Rule), f"{cls.__name__}.{f.name}"


def test_engine_reads_a_section_in_the_study_wording() -> None:
    fields = schema.read_fields(model.TrialsSpec, {"parallel": 2, "timeout_s": 5}, path="trials")
    assert fields == {"parallel": 2, "timeout_s": 5.0}
    assert isinstance(fields["timeout_s"], float)
    with pytest.raises(SpecError) as info:
        schema.read_fields(model.BatchSizeSpec, {"tolerance": 0.9}, path="batch_size")
    assert info.value.field == "batch_size.tolerance"
    assert info.value.message == "must be a number > 0 and <= 0.5, got 0.9"
    with pytest.raises(SpecError) as info:
        schema.read_fields(model.ObjectiveSpec, {"reduce": "mean"}, path="objective")
    assert info.value.message == "must be one of best, last, got 'mean' (str)"
    with pytest.raises(SpecError, match=r"unknown key 'paralel' in section 'trials'; did you"):
        schema.read_fields(model.TrialsSpec, {"paralel": 2}, what="section 'trials'")
