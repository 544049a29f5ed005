"""Fixtures of the backend tests: the example study's trainer config and a tiny dataset."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dvt_hpo.backends.deepvisiontools.demo_data import write_dataset
from tests.ci_skips import BACKEND_ELSEWHERE, REQUIRE_BACKEND, backend_required

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_DIR = REPO_ROOT / "studies" / "deepvisiontools"
ENTRYPOINT = "dvt_hpo.backends.deepvisiontools:run"
SCHEMA = "dvt_hpo.backends.deepvisiontools:BackendConfig"

HAS_DVT = importlib.util.find_spec("deepvisiontools") is not None
# Under DVT_HPO_REQUIRE_BACKEND=1 (.ci/run's run in .venv-dvt) the skip is a failure (see
# tests/ci_skips.py); without CI too, so that a wrong virtualenv cannot pass for the backend's.
needs_dvt = pytest.mark.skipif(
    not HAS_DVT and not backend_required(),
    reason=f"{BACKEND_ELSEWHERE}: it runs in its own virtualenv "
    "(.venv-dvt, see .ci/run) so the core suite keeps torch 2.13.0",
)


# Session scope: before any module fixture that would run deepvisiontools and fail less clearly.
@pytest.fixture(scope="session", autouse=True)
def _backend_installed_when_required() -> None:
    if backend_required() and not HAS_DVT:
        pytest.fail(f"{REQUIRE_BACKEND}=1 but deepvisiontools is not installed in {sys.prefix}")


def example_trainer_config() -> dict[str, Any]:
    """The example study's trainer.yaml (one source for the example and the tests)."""
    return yaml.safe_load((EXAMPLE_DIR / "trainer.yaml").read_text())


@pytest.fixture
def trainer_config() -> dict[str, Any]:
    return example_trainer_config()


@pytest.fixture(scope="session")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """16 train and 8 valid 64x64 images with binary masks (generated once per session)."""
    return write_dataset(tmp_path_factory.mktemp("seg") / "data", classes=1, seed=0)
