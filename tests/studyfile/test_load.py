"""load_spec as a whole: a good file, defaults, nothing written, the runnable checks."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest

from dvt_hpo.studyfile import (
    Condition,
    Dimension,
    PrunerSpec,
    SamplerSpec,
    StudySpec,
    load_spec,
    spec_to_dict,
)
from tests.studyfile.helpers import (
    BASE,
    GOOD,
    bad_file_test,
    case,
    snapshot,
    study_with,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_good_spec_loads_into_typed_objects(write: Callable[..., Path], tmp_path: Path) -> None:
    path = write(GOOD)
    spec = load_spec(path)
    assert isinstance(spec, StudySpec)
    assert spec.path == path.resolve()

    study = spec.study
    assert study.name == "digits-cnn"
    assert study.storage == f"sqlite:///{tmp_path.resolve() / 'digits-cnn.db'}"
    assert study.n_trials == 30
    assert study.timeout_s is None
    # Defaults are filled once, here: TPE gets constant_liar because trials.parallel is 2.
    assert study.sampler == SamplerSpec(
        "tpe", {"seed": 0, "n_startup_trials": 8, "constant_liar": True}
    )
    assert study.pruner == PrunerSpec("median", {"n_startup_trials": 4, "n_warmup_steps": 2})
    assert study.max_failures is None
    assert (study.heartbeat_interval_s, study.grace_period_s) == (10, 20)

    assert (spec.objective.metric, spec.objective.direction) == ("macro_f1", "maximize")
    assert spec.objective.reduce == "last"

    trials = spec.trials
    assert trials.launcher == "process" and trials.nproc_per_node == 1
    assert trials.parallel == 2
    assert trials.devices == (0, 1)
    assert trials.timeout_s == 600.0 and isinstance(trials.timeout_s, float)
    assert trials.memory_limit == 4 * 1024**3
    assert trials.runs_dir == tmp_path.resolve() / "runs" / "digits-cnn"
    assert (trials.stop_grace_s, trials.max_retries, trials.report_timeout_s) == (10.0, 1, 60.0)

    bs = spec.batch_size
    assert (bs.auto, bs.path, bs.min, bs.max, bs.start) == (True, "data.batch_size", 8, 1024, None)
    assert bs.memory_keys == ("model.builder", "model.kwargs.width")
    assert bs.accumulate_path == "precision.accumulate_steps"

    # The trainer config is the full, normalized TrainerConfig: defaults filled in.
    config = spec.trainer.config
    assert spec.trainer.entrypoint == "dvt_hpo.train:run"
    assert config["epochs"] == 3
    assert config["model"] == {"builder": "cnn", "kwargs": {"width": 16}}
    assert config["data"]["batch_size"] == 64
    assert config["optim"]["optim_args"] == {"lr": 0.001}
    assert config["checkpoint"]["enable_checkpointing"] is True

    lr, width, depth, ema, decay = spec.search_space
    assert lr == Dimension("lr", "float", "optim.optim_args.lr", low=1e-4, high=0.1, log=True)
    assert isinstance(lr.low, float)  # `1e-4` is a float, as in YAML 1.2
    assert width.choices == (16, 32, 64)
    assert (depth.kind, depth.low, depth.high, depth.step) == ("int", 1, 4, 1)
    assert ema.kind == "bool" and ema.when is None
    assert decay.when == Condition({"ema": (True,)})

    assert spec.tracking.mlflow is not None
    assert spec.tracking.mlflow.tracking_uri == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    assert spec.tracking.mlflow.experiment == "digits"


def test_spec_to_dict_is_json_safe_and_redacts(write: Callable[..., Path]) -> None:
    text = study_with("  storage: postgresql+psycopg2://bob:hunter2@db.example:5432/hpo")
    spec = load_spec(write(text))
    assert spec.study.storage == "postgresql+psycopg2://bob:hunter2@db.example:5432/hpo"
    data = spec_to_dict(spec)
    dumped = json.dumps(data)
    assert "hunter2" not in dumped
    assert data["study"]["storage"] == "postgresql+psycopg2://bob:***@db.example:5432/hpo"
    assert data["path"] == str(spec.path)
    assert data["search_space"][0]["name"] == "lr"
    assert json.loads(dumped) == data


def test_minimal_spec_defaults(write: Callable[..., Path], tmp_path: Path) -> None:
    spec = load_spec(write(BASE))
    assert spec.objective.metric == "loss" and spec.objective.direction == "minimize"
    # BASE trains 1 epoch: short curves get the GP without pruning (benchmarks/search/,
    # docs/performance/search-efficiency.md).
    assert spec.study.sampler == SamplerSpec("mf_gp", {})
    assert spec.study.pruner == PrunerSpec("none", {})
    assert spec.trials.devices == "auto"
    assert spec.trials.memory_limit is None
    assert spec.batch_size.auto is False
    assert spec.tracking.mlflow is None
    assert spec.trials.runs_dir == tmp_path.resolve() / "runs" / "s"


def test_loading_writes_nothing(write: Callable[..., Path], tmp_path: Path) -> None:
    write("epochs: 2\n", name="trainer.yaml")
    path = write(
        GOOD.replace(
            "  config:\n    epochs: 3\n    model: {builder: cnn, kwargs: {width: 16}}\n",
            "  config_file: trainer.yaml\n",
        )
    )
    before = snapshot(tmp_path)
    spec = load_spec(path, ["study.storage=journal:///j.log"])
    load_spec(path)
    assert spec.study.storage.startswith("journal:///")
    assert snapshot(tmp_path) == before
    assert not list(tmp_path.rglob("*.db")) and not list(tmp_path.rglob("*.log"))
    assert not (tmp_path / "runs").exists()


@pytest.mark.processes
def test_loading_does_not_import_torch(write: Callable[..., Path]) -> None:
    path = write(GOOD.replace("kind: tpe", "kind: gp"))
    code = (
        "import sys\n"
        "from dvt_hpo.studyfile import load_spec, build_sampler, build_pruner\n"
        f"spec = load_spec({str(path)!r})\n"
        "assert spec.study.sampler.kind == 'gp'\n"
        "build_pruner(spec.study.pruner)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


# fmt: off
BAD_FILE = [
    case("unknown-section", BASE + "trails:\n  parallel: 2\n", 7, "trails",
         "unknown section 'trails'", "did you mean 'trials'?"),
    case("not-a-mapping", "- 1\n- 2\n", 1, None, "must be a mapping of sections"),
    case("empty-file", "", None, None, "the study file is empty"),
]
# fmt: on


test_bad_file = bad_file_test(BAD_FILE)
