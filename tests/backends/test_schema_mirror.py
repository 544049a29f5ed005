"""The backend's torch-free schema mirrors deepvisiontools' TrainerConfig dataclasses: same
field names, same defaults, so a deepvisiontools release that adds, renames or re-defaults a
field fails here instead of being validated against a stale copy."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dvt_hpo.backends.deepvisiontools.schema import MIRRORED, OURS, RUNTIME_ONLY
from tests.backends.conftest import REPO_ROOT, needs_dvt

pytestmark = needs_dvt

# deepvisiontools' side, read in a child process: importing it writes ultralytics' settings
# file under $HOME, which the child points at a temporary folder.
_READ = """
import dataclasses, json, sys
import deepvisiontools.train.trainconfig as tc
out = {}
for name in sys.argv[1:]:
    cls = getattr(tc, name)
    fields = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = "<required>"
        if dataclasses.is_dataclass(default):
            default = "<section>"
        try:
            json.dumps(default)
        except TypeError:
            default = repr(default)
        fields[f.name] = default
    out[name] = fields
print(json.dumps(out))
"""


def _ours(cls: type) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = "<required>"
        if dataclasses.is_dataclass(default):
            default = "<section>"
        fields[f.name] = default
    return fields


@pytest.fixture(scope="module")
def theirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    home = tmp_path_factory.mktemp("home")
    done = subprocess.run(
        [sys.executable, "-c", _READ, *MIRRORED],
        cwd=home,
        # An existing folder: ultralytics falls back to /tmp/Ultralytics otherwise.
        env={**os.environ, "HOME": str(home), "YOLO_CONFIG_DIR": str(home)},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(MIRRORED))
def test_fields_and_defaults_match(name: str, theirs: dict[str, dict[str, Any]]) -> None:
    ours = _ours(MIRRORED[name])
    library = dict(theirs[name])
    if name == "TrainerConfig":
        for key in RUNTIME_ONLY:
            del library[key]
        for key in OURS:
            del ours[key]
    assert sorted(ours) == sorted(library), name
    differences = {}
    for key, value in library.items():
        mine = ours[key]
        if isinstance(value, list) and isinstance(mine, list):
            # The library's tuple monitor arrives as a list in YAML (JSON made it a list too).
            value, mine = list(value), list(mine)
        if value == "<required>" or mine == "<required>":
            # Required here where the library defaults to None (model_spec, optimizer): its
            # from_yaml raises without them, so validate says so first.
            continue
        if value != mine and not (value is None and mine == "<section>"):
            differences[key] = (mine, value)
    assert differences == {}, f"{name}: ours vs deepvisiontools' defaults {differences}"


def test_example_trainer_yaml_loads_with_deepvisiontools_from_yaml(tmp_path: Path) -> None:
    """The example's trainer block (without our two sections) is valid input of from_yaml."""
    code = (
        "import yaml, sys\n"
        "from deepvisiontools.train import TrainerConfig\n"
        "data = yaml.safe_load(open(sys.argv[1]))\n"
        "block = {k: v for k, v in data.items() if k not in ('data', 'settings')}\n"
        "cfg = TrainerConfig.from_yaml(yaml.safe_dump({'trainer': block}), train_loader=None)\n"
        "print(cfg.epochs, cfg.model_spec.builder)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(REPO_ROOT / "studies/deepvisiontools/trainer.yaml")],
        cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path), "YOLO_CONFIG_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["2", "smp"]
