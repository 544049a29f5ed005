from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import optuna
import pytest

from dvt_hpo import space
from dvt_hpo.exceptions import SpecError
from dvt_hpo.spec import (
    Condition,
    Dimension,
    PrunerSpec,
    SamplerSpec,
    StudySpec,
    build_pruner,
    build_sampler,
    load_spec,
    spec_to_dict,
)
from dvt_hpo.units import parse_bytes

optuna.logging.set_verbosity(optuna.logging.WARNING)

GOOD = """\
study:
  name: digits-cnn
  n_trials: 30
  sampler: {kind: tpe, seed: 0, n_startup_trials: 8}
  pruner: {kind: median, n_startup_trials: 4, n_warmup_steps: 2}
objective:
  metric: macro_f1
  reduce: last
trials:
  parallel: 2
  devices: "cuda:0,1"
  timeout_s: 600
  memory_limit: 4GiB
batch_size:
  auto: true
  path: data.batch_size
  min: 8
  max: 1024
  memory_keys: [model.builder, model.kwargs.width]
trainer:
  config:
    epochs: 3
    model: {builder: cnn, kwargs: {width: 16}}
search_space:
  - {name: lr, path: optim.optim_args.lr, kind: float, low: 1e-4, high: 1.0e-1, log: true}
  - {name: width, path: model.kwargs.width, kind: categorical, choices: [16, 32, 64]}
  - {name: depth, path: model.kwargs.depth, kind: int, low: 1, high: 4}
  - {name: ema, path: ema.enabled, kind: bool}
  - {name: decay, path: ema.decay, kind: float, low: 0.9, high: 0.999, when: {ema: true}}
tracking:
  mlflow: {tracking_uri: sqlite:///mlflow.db, experiment: digits}
"""

# A minimal valid study: bad cases below edit it, so their line numbers are easy to follow.
BASE = """\
study:
  name: s
trainer:
  config: {epochs: 1}
search_space:
  - {name: lr, path: optim.optim_args.lr, kind: float, low: 1.0e-4, high: 0.1, log: true}
"""
DIM_LINE = (
    "  - {name: lr, path: optim.optim_args.lr, kind: float, low: 1.0e-4, high: 0.1, log: true}"
)


def study_with(*lines: str) -> str:
    """BASE with lines inserted into `study:` after the name (from line 3 on)."""
    return BASE.replace("  name: s\n", "  name: s\n" + "".join(f"{line}\n" for line in lines))


def more_dims(*dims: str) -> str:
    """BASE with more dimensions after its first (from line 7 on)."""
    return BASE + "".join(f"  - {dim}\n" for dim in dims)


def with_dim(dim: str) -> str:
    """BASE with its only dimension (line 6) replaced."""
    return BASE.replace(DIM_LINE, f"  - {dim}")


def decay_when(condition: str) -> str:
    """A dimension conditional on ``condition``."""
    return f"{{name: d, path: ema.decay, kind: float, low: 0.9, high: 0.99, when: {condition}}}"


@pytest.fixture
def write(tmp_path: Path) -> Callable[..., Path]:
    def _write(text: str, name: str = "study.yaml") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return path

    return _write


def snapshot(folder: Path) -> dict[str, float]:
    return {str(p.relative_to(folder)): p.stat().st_mtime for p in folder.rglob("*")}


# --- a good spec -------------------------------------------------------------------------------


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
    assert study.sampler == SamplerSpec("tpe", {"seed": 0, "n_startup_trials": 8})
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
    assert spec.study.sampler == SamplerSpec("tpe", {})
    assert spec.study.pruner == PrunerSpec("median", {})
    assert spec.trials.devices == "auto"
    assert spec.trials.memory_limit is None
    assert spec.batch_size.auto is False
    assert spec.tracking.mlflow is None
    assert spec.trials.runs_dir == tmp_path.resolve() / "runs" / "s"


def test_dimension_name_defaults_to_path(write: Callable[..., Path]) -> None:
    spec = load_spec(write(with_dim("{path: ema.enabled, kind: bool}")))
    assert spec.search_space[0].name == "ema.enabled"


def test_yaml_anchors_and_merge_keys(write: Callable[..., Path]) -> None:
    anchored = BASE.replace("  - {name: lr,", "  - &lr {name: lr,")
    text = anchored + "  - {<<: *lr, name: wd, path: optim.weight_decay, low: 1.0e-6}\n"
    lr, wd = load_spec(write(text)).search_space
    assert (wd.name, wd.path, wd.kind, wd.low, wd.high, wd.log) == (
        "wd",
        "optim.weight_decay",
        "float",
        1e-6,
        lr.high,
        True,
    )
    # A key written next to the merge overrides the merged one and keeps its own line.
    with pytest.raises(SpecError) as info:
        load_spec(write(text.replace("low: 1.0e-6", "low: -1.0")))
    assert (info.value.line, info.value.field) == (7, "search_space[1].low")
    assert "log sampling needs low > 0, got low=-1.0" in str(info.value)


@pytest.mark.parametrize(
    ("metric", "direction"),
    [
        ("loss", "minimize"),
        ("val_loss", "minimize"),
        ("macro_f1", "maximize"),
        ("accuracy", "maximize"),
    ],
)
def test_direction_default(write: Callable[..., Path], metric: str, direction: str) -> None:
    spec = load_spec(write(BASE + f"objective: {{metric: {metric}}}\n"))
    assert spec.objective.direction == direction


def test_direction_explicit_wins(write: Callable[..., Path]) -> None:
    spec = load_spec(write(BASE + "objective: {metric: loss, direction: maximize}\n"))
    assert spec.objective.direction == "maximize"


@pytest.mark.parametrize(
    ("storage", "expected"),
    [
        ("sqlite:///x.db", "sqlite:///{dir}/x.db"),
        ("sqlite:///sub/x.db?timeout=60", "sqlite:///{dir}/sub/x.db?timeout=60"),
        ("sqlite:////abs/x.db", "sqlite:////abs/x.db"),
        ("journal:///x.log", "journal:///{dir}/x.log"),
        ("journal:////abs/x.log", "journal:////abs/x.log"),
        ("postgresql://u:p@host:5432/db", "postgresql://u:p@host:5432/db"),
        ("postgresql+psycopg2://host/db", "postgresql+psycopg2://host/db"),
        ("mysql://u@host/db", "mysql://u@host/db"),
    ],
)
def test_storage_resolution(
    write: Callable[..., Path], tmp_path: Path, storage: str, expected: str
) -> None:
    spec = load_spec(write(study_with(f"  storage: {storage}")))
    assert spec.study.storage == expected.format(dir=tmp_path.resolve())


def test_storage_default_is_next_to_the_study_file(
    write: Callable[..., Path], tmp_path: Path
) -> None:
    path = write(BASE, name="sub/dir/study.yaml")
    spec = load_spec(path)
    assert spec.study.storage == f"sqlite:///{tmp_path.resolve() / 'sub' / 'dir' / 's.db'}"


def test_config_file_relative_to_study_folder(write: Callable[..., Path], tmp_path: Path) -> None:
    write("epochs: 2\noptim:\n  optim_args: {lr: 0.01}\n", name="conf/trainer.yaml")
    path = write(
        BASE.replace("  config: {epochs: 1}", "  config_file: conf/trainer.yaml"),
        name="study.yaml",
    )
    spec = load_spec(path)
    assert spec.trainer.config_file == (tmp_path / "conf" / "trainer.yaml").resolve()
    assert spec.trainer.config["epochs"] == 2
    assert spec.trainer.config["optim"]["optim_args"] == {"lr": 0.01}
    assert spec.trainer.config["data"]["kind"] == "digits"  # defaults filled


def test_error_in_config_file_names_that_file_and_line(write: Callable[..., Path]) -> None:
    write("epochs: 2\nmodel:\n  builder: cnn\n  kwarg: {width: 3}\n", name="conf/trainer.yaml")
    path = write(BASE.replace("  config: {epochs: 1}", "  config_file: conf/trainer.yaml"))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    err = info.value
    assert err.file == str(path.parent / "conf" / "trainer.yaml")
    assert err.line == 4
    assert err.field == "trainer.config.model.kwarg"
    assert "did you mean 'kwargs'?" in str(err)


def test_trials_and_batch_size_options(write: Callable[..., Path], tmp_path: Path) -> None:
    text = BASE + textwrap.dedent(
        """\
        trials:
          launcher: torchrun
          nproc_per_node: 2
          devices: [2, 3]
          stop_grace_s: 0
          max_retries: 0
          memory_limit: 512MiB
          report_timeout_s: 5
          runs_dir: out/runs
        batch_size:
          auto: true
          min: 4
          max: 64
          start: 16
          multiple_of: 4
          tolerance: 0.5
          effective: 128
        """
    )
    spec = load_spec(write(text))
    assert spec.trials.launcher == "torchrun" and spec.trials.nproc_per_node == 2
    assert spec.trials.devices == (2, 3)
    assert spec.trials.memory_limit == 512 * 1024**2
    assert spec.trials.runs_dir == tmp_path.resolve() / "out" / "runs"
    assert spec.batch_size.effective == 128 and spec.batch_size.start == 16


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("auto", "auto"),
        ("cpu", "cpu"),
        ("cuda", "cuda"),
        ("GPU", "cuda"),
        ("2", 2),
        ("[0, 1]", (0, 1)),
        ('"0,1"', (0, 1)),
        ('"cuda:0,1"', (0, 1)),
        ('"cuda:2"', (2,)),
        ('" CUDA:3 "', (3,)),
        ('"1"', (1,)),
    ],
)
def test_devices_forms_are_normalized(
    write: Callable[..., Path], value: str, expected: object
) -> None:
    spec = load_spec(write(BASE + f"trials: {{devices: {value}}}\n"))
    assert spec.trials.devices == expected


@pytest.mark.parametrize(
    ("text", "size"),
    [
        (4096 * 1024, 4096 * 1024),
        ("4GiB", 4 * 1024**3),
        ("512MiB", 512 * 1024**2),
        ("2GB", 2 * 1000**3),
        ("1.5G", int(1.5 * 1024**3)),
        ("100 mb", 100 * 1000**2),
        ("64Mi", 64 * 1024**2),
    ],
)
def test_parse_bytes(text: int | str, size: int) -> None:
    assert parse_bytes(text) == size


@pytest.mark.parametrize("text", ["4 gigs", "GiB", "-1G", "", "1e3G", True, 0, 1.5])
def test_parse_bytes_rejects(text: object) -> None:
    with pytest.raises(ValueError):
        parse_bytes(text)  # type: ignore[arg-type]


def test_custom_entrypoint_checks_paths_against_the_config_dict(write: Callable[..., Path]) -> None:
    text = textwrap.dedent(
        """\
        study: {name: s}
        trainer:
          entrypoint: mylib.train:main
          config: {opt: {lr: 0.1}, layers: [{units: 4}]}
        search_space:
          - {name: lr, path: opt.lr, kind: float, low: 0.01, high: 0.5}
          - {name: units, path: "layers[0].units", kind: int, low: 1, high: 8}
        """
    )
    spec = load_spec(write(text))
    assert spec.trainer.config == {"opt": {"lr": 0.1}, "layers": [{"units": 4}]}
    # Without a schema the last key may be new (the trainer reads what it gets)...
    spec = load_spec(write(text.replace("path: opt.lr", "path: opt.momentum")))
    assert spec.search_space[0].path == "opt.momentum"
    # ... but every section on the way must exist.
    with pytest.raises(SpecError) as info:
        load_spec(write(text.replace("path: opt.lr", "path: optt.lr")))
    assert info.value.line == 6 and info.value.field == "search_space[0].path"
    assert "no key 'optt' at the top level; did you mean 'opt'?" in str(info.value)
    with pytest.raises(SpecError, match=r"search_space\[1\]\.path: .*index 3 is out of range"):
        load_spec(write(text.replace("layers[0].units", "layers[3].units")))
    with pytest.raises(SpecError, match=r"search_space\[0\]\.path: 'opt' is a section \(dict\)"):
        load_spec(write(text.replace("path: opt.lr", "path: opt")))


def test_custom_schema_module_next_to_the_study(write: Callable[..., Path], tmp_path: Path) -> None:
    write(
        "from dataclasses import dataclass, field\n\n\n"
        "@dataclass\nclass Opt:\n    lr: float = 0.1\n\n\n"
        "@dataclass\nclass MyConfig:\n    epochs: int = 1\n    opt: Opt = field(default_factory=Opt)\n",
        name="myschema_for_spec_test.py",
    )
    text = textwrap.dedent(
        """\
        study: {name: s}
        trainer:
          entrypoint: mylib.train:main
          schema: myschema_for_spec_test:MyConfig
          config: {epochs: 2}
        search_space:
          - {name: lr, path: opt.lr, kind: float, low: 0.01, high: 0.5}
        """
    )
    path = write(text)
    before = snapshot(tmp_path)
    try:
        spec = load_spec(path)
        assert spec.trainer.config == {"epochs": 2, "opt": {"lr": 0.1}}
        assert spec.trainer.schema == "myschema_for_spec_test:MyConfig"
        with pytest.raises(SpecError, match=r"search_space\[0\]\.low: .* takes int"):
            load_spec(write(text.replace("path: opt.lr", "path: epochs")))
    finally:
        sys.modules.pop("myschema_for_spec_test", None)
    assert snapshot(tmp_path).keys() == before.keys()  # no __pycache__ either


def test_conditional_dimensions_may_share_a_path_when_exclusive(write: Callable[..., Path]) -> None:
    text = textwrap.dedent(
        """\
        study: {name: s}
        trainer: {config: {}}
        search_space:
          - {name: opt, path: optim.target, kind: categorical, choices: [torch.optim.SGD, torch.optim.Adam]}
          - {name: lr_sgd, path: optim.optim_args.lr, kind: float, low: 0.01, high: 1.0, when: {opt: torch.optim.SGD}}
          - {name: lr_adam, path: optim.optim_args.lr, kind: float, low: 1.0e-5, high: 0.01, when: {opt: [torch.optim.Adam]}}
        """
    )
    spec = load_spec(write(text))
    assert [d.name for d in spec.search_space] == ["opt", "lr_sgd", "lr_adam"]
    with pytest.raises(SpecError, match="is the same as search_space\\[1\\].path"):
        load_spec(
            write(text.replace("when: {opt: [torch.optim.Adam]}", "when: {opt: [torch.optim.SGD]}"))
        )


# --- overrides ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "override",
    ["search_space.0.high=0.5", "search_space[0].high=0.5", "search_space[0].high = 0.5"],
)
def test_override_search_space_index(write: Callable[..., Path], override: str) -> None:
    spec = load_spec(write(BASE), [override])
    assert spec.search_space[0].high == 0.5


def test_overrides_parse_yaml_values(write: Callable[..., Path], tmp_path: Path) -> None:
    spec = load_spec(
        write(BASE),
        [
            "study.n_trials=20",
            "study.sampler={kind: random, seed: 3}",
            "trainer.config.epochs=3",
            "trials.devices=[0, 1]",
            "objective.metric=macro_f1",
        ],
    )
    assert spec.study.n_trials == 20
    assert spec.study.sampler == SamplerSpec("random", {"seed": 3})
    assert spec.trainer.config["epochs"] == 3
    assert spec.trials.devices == (0, 1)
    assert spec.objective.direction == "maximize"


def test_override_into_config_file(write: Callable[..., Path]) -> None:
    write("epochs: 2\n", name="trainer.yaml")
    path = write(BASE.replace("  config: {epochs: 1}", "  config_file: trainer.yaml"))
    spec = load_spec(path, ["trainer.config.epochs=5", "trainer.config.data.batch_size=16"])
    assert spec.trainer.config["epochs"] == 5
    assert spec.trainer.config["data"]["batch_size"] == 16


def test_later_override_wins(write: Callable[..., Path]) -> None:
    spec = load_spec(write(BASE), ["study.n_trials=2", "study.n_trials=7"])
    assert spec.study.n_trials == 7


# --- loading writes nothing and imports no torch --------------------------------------------


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


def test_loading_does_not_import_torch(write: Callable[..., Path]) -> None:
    path = write(GOOD.replace("kind: tpe", "kind: gp"))
    code = (
        "import sys\n"
        "from dvt_hpo.spec import load_spec, build_sampler, build_pruner\n"
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


# --- optuna factory ----------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
def test_build_sampler_seed_offset_and_constant_liar() -> None:
    dims = (Dimension("x", "float", "x", low=0.0, high=1.0),)
    tpe = build_sampler(SamplerSpec("tpe", {"seed": 5}), dims, seed_offset=3, parallel=4)
    assert isinstance(tpe, optuna.samplers.TPESampler)
    assert tpe._constant_liar is True

    # A resumed seeded sampler continues differently from a fresh one with the same seed,
    # exactly like a sampler seeded with seed + offset.
    def first_values(seed: int, offset: int = 0) -> list[float]:
        sampler = build_sampler(SamplerSpec("random", {"seed": seed}), dims, seed_offset=offset)
        study = optuna.create_study(sampler=sampler)
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
        return [t.params["x"] for t in study.trials]

    assert first_values(5, offset=3) != first_values(5)
    assert first_values(5, offset=3) == first_values(8)
    # QMC continues its sequence from the study, so its seed is left alone.
    qmc = build_sampler(SamplerSpec("qmc", {"seed": 5}), dims, seed_offset=3)
    assert qmc._seed == 5
    # The user's explicit constant_liar wins.
    spec = SamplerSpec("tpe", {"constant_liar": False})
    assert build_sampler(spec, dims, parallel=4)._constant_liar is False


def test_build_sampler_grid_enumerates_the_space() -> None:
    dims = (
        Dimension("a", "float", "a", low=0.1, high=0.3, step=0.1),
        Dimension("b", "int", "b", low=1, high=5, step=2),
        Dimension("c", "bool", "c"),
    )
    sampler = build_sampler(SamplerSpec("grid", {"seed": 0}), dims)
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda t: (space.sample(t, dims), 0.0)[1], n_trials=100)
    combos = {(t.params["a"], t.params["b"], t.params["c"]) for t in study.trials}
    assert len(study.trials) == len(combos) == 3 * 3 * 2
    assert {c[0] for c in combos} == {0.1, 0.2, 0.3}


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.parametrize(
    ("kind", "kwargs", "cls"),
    [
        ("random", {}, optuna.samplers.RandomSampler),
        ("cmaes", {"popsize": 4}, optuna.samplers.CmaEsSampler),
        ("qmc", {"qmc_type": "halton", "seed": 1}, optuna.samplers.QMCSampler),
        ("nsga2", {"population_size": 10}, optuna.samplers.NSGAIISampler),
    ],
)
def test_sampler_kinds(write: Callable[..., Path], kind: str, kwargs: dict, cls: type) -> None:
    args = "".join(f", {k}: {v}" for k, v in kwargs.items())
    spec = load_spec(write(study_with(f"  sampler: {{kind: {kind}{args}}}")))
    assert spec.study.sampler == SamplerSpec(kind, kwargs)
    assert isinstance(build_sampler(spec.study.sampler, spec.search_space), cls)


@pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
@pytest.mark.parametrize(
    ("text", "cls"),
    [
        ("none", optuna.pruners.NopPruner),
        ("null", optuna.pruners.NopPruner),
        ("{kind: percentile, percentile: 25}", optuna.pruners.PercentilePruner),
        ("{kind: successive_halving, reduction_factor: 3}", optuna.pruners.SuccessiveHalvingPruner),
        ("{kind: hyperband, max_resource: 10}", optuna.pruners.HyperbandPruner),
        ("{kind: threshold, upper: 1.0}", optuna.pruners.ThresholdPruner),
        ("{kind: wilcoxon, p_threshold: 0.05}", optuna.pruners.WilcoxonPruner),
    ],
)
def test_pruner_kinds(write: Callable[..., Path], text: str, cls: type) -> None:
    spec = load_spec(write(study_with(f"  pruner: {text}")))
    assert isinstance(build_pruner(spec.study.pruner), cls)


def test_missing_sampler_package_is_named(
    write: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A None entry in sys.modules makes importlib.util.find_spec report the package missing.
    monkeypatch.setitem(sys.modules, "cmaes", None)
    with pytest.raises(SpecError) as info:
        load_spec(write(study_with("  sampler: {kind: cmaes}")))
    assert info.value.line == 3 and info.value.field == "study.sampler.kind"
    assert "sampler kind 'cmaes' needs the package 'cmaes': pip install cmaes" in str(info.value)
    monkeypatch.setitem(sys.modules, "scipy", None)
    with pytest.raises(SpecError, match="needs the package 'scipy': pip install scipy"):
        load_spec(write(study_with("  sampler: gp")))


# --- bad study files ---------------------------------------------------------------------------

SET = "<--set>"


def case(
    ident: str,
    text: str,
    line: int | None,
    field: str | None,
    *contains: str,
    overrides: Sequence[str] = (),
    file: str | None = None,
    absent: Sequence[str] = (),
) -> Any:
    """One bad study: the error must name ``file`` (default: the study file), ``line`` and
    ``field``, contain every string of ``contains`` and none of ``absent``."""
    return pytest.param(text, list(overrides), file, line, field, contains, absent, id=ident)


# fmt: off
BAD = [
    case("unknown-section", BASE + "trails:\n  parallel: 2\n", 7, "trails",
         "unknown section 'trails'", "did you mean 'trials'?"),
    case("not-a-mapping", "- 1\n- 2\n", 1, None, "must be a mapping of sections"),
    case("empty-file", "", None, None, "the study file is empty"),
    case("yaml-syntax", "study:\n  name: [s\ntrainer: {}\n", 3, None, "invalid YAML"),
    case("duplicate-key", study_with("  name: t"), 3, "study.name",
         "duplicate key 'name' (first given at line 2)"),
    case("study-unknown-key", study_with("  n_trails: 3"), 3, "study.n_trails",
         "unknown key 'n_trails' in section 'study'", "did you mean 'n_trials'?", "allowed keys:"),
    case("study-missing", BASE.replace("study:\n  name: s\n", ""), 1, "study",
         "missing required section 'study'"),
    case("study-name-missing", BASE.replace("  name: s\n", "  n_trials: 3\n"), 1, "study.name",
         "missing required key 'name'"),
    case("study-name-chars", BASE.replace("name: s", "name: my study/1"), 2, "study.name",
         "'my study/1'", "letters, digits"),
    case("n-trials-zero", study_with("  n_trials: 0"), 3, "study.n_trials",
         "must be an integer >= 1 or null, got 0"),
    case("n-trials-str", study_with("  n_trials: ten"), 3, "study.n_trials", "got 'ten' (str)"),
    case("timeout-negative", study_with("  timeout_s: -5"), 3, "study.timeout_s",
         "must be a number > 0 or null, got -5"),
    case("max-failures-ratio", study_with("  max_failures: 1.5"), 3, "study.max_failures",
         "a float in (0, 1)", "got 1.5"),
    case("grace-below-heartbeat", study_with("  heartbeat_interval_s: 10", "  grace_period_s: 5"),
         4, "study.grace_period_s", "greater than heartbeat_interval_s (10)", "got 5"),
    case("storage-scheme", study_with("  storage: postgres://bob:hunter2@db/x"), 3, "study.storage",
         "did you mean 'postgresql'?", "postgres://bob:***@db/x", absent=["hunter2"]),
    case("storage-memory", study_with("  storage: 'sqlite://'"), 3, "study.storage",
         "sqlite storage needs a file"),
    case("storage-no-scheme", study_with("  storage: study.db"), 3, "study.storage",
         "must be a storage URL", "'study.db'"),
    case("sampler-kind", study_with("  sampler: {kind: tpee, seed: 1}"), 3, "study.sampler.kind",
         "unknown sampler kind 'tpee'", "did you mean 'tpe'?"),
    case("sampler-kwarg", study_with("  sampler: {kind: tpe, n_startup_trial: 3}"), 3,
         "study.sampler.n_startup_trial", "unknown argument 'n_startup_trial' for TPESampler",
         "did you mean 'n_startup_trials'?", "accepted: "),
    case("sampler-kwarg-type", study_with("  sampler: {kind: random, seed: abc}"), 3,
         "study.sampler.seed", "'seed' of RandomSampler", "takes int", "got 'abc' (str)"),
    case("sampler-object-kwarg", study_with("  sampler: {kind: tpe, gamma: 3}"), 3,
         "study.sampler.gamma", "takes a Python object"),
    case("sampler-not-mapping", study_with("  sampler: [tpe]"), 3, "study.sampler",
         "must be a kind", "got ['tpe'] (list)"),
    case("grid-continuous", study_with("  sampler: grid"), 7, "search_space[0]",
         "sampler kind 'grid' needs every dimension enumerable", "'lr' has no step"),
    case("grid-search-space-given", study_with("  sampler: {kind: grid, search_space: {}}"), 3,
         "study.sampler.search_space", "built from search_space"),
    case("pruner-kind", study_with("  pruner: hyperbnd"), 3, "study.pruner",
         "unknown pruner kind 'hyperbnd'", "did you mean 'hyperband'?"),
    case("pruner-required-arg", study_with("  pruner: {kind: percentile}"), 3, "study.pruner.kind",
         "PercentilePruner", "needs the argument 'percentile'"),
    case("pruner-optuna-rule", study_with("  pruner: {kind: median, n_startup_trials: -1}"), 3,
         "study.pruner", "Optuna rejects the arguments", "-1"),
    case("pruner-threshold", study_with("  pruner: {kind: threshold}"), 3, "study.pruner.kind",
         "needs 'lower' or 'upper'"),
    case("objective-direction", BASE + "objective:\n  direction: maximise\n", 8,
         "objective.direction", "must be one of minimize, maximize", "did you mean 'maximize'?"),
    case("objective-reduce", BASE + "objective: {reduce: mean}\n", 7, "objective.reduce",
         "must be one of best, last, got 'mean'"),
    case("nproc-needs-torchrun", BASE + "trials:\n  nproc_per_node: 2\n", 8,
         "trials.nproc_per_node", "needs launcher: torchrun"),
    case("nproc-more-than-devices",
         BASE + "trials: {launcher: torchrun, nproc_per_node: 4, devices: [0, 1]}\n", 7,
         "trials.nproc_per_node", "needs at least 4 GPUs", "lists 2"),
    case("devices-zero", BASE + "trials:\n  devices: 0\n", 8, "trials.devices",
         "GPU count must be >= 1, got 0", "[0] or 'cuda:0'"),
    case("devices-garbage", BASE + "trials:\n  devices: gpu0\n", 8, "trials.devices",
         "'0,1', 'cuda:0,1' or 'cuda:2'", "got 'gpu0'"),
    case("devices-duplicate", BASE + "trials:\n  devices: [0, 0]\n", 8, "trials.devices",
         "distinct"),
    case("devices-negative-id", BASE + "trials:\n  devices:\n    - 0\n    - -1\n", 10,
         "trials.devices[1]", "integers >= 0, got -1"),
    case("memory-garbage", BASE + "trials:\n  memory_limit: 4 gigs\n", 8, "trials.memory_limit",
         "unknown size unit 'gigs'", "GiB"),
    case("memory-tiny", BASE + "trials:\n  memory_limit: 4096\n", 8, "trials.memory_limit",
         "at least 16MiB", "4096"),
    case("stop-grace-negative", BASE + "trials: {stop_grace_s: -1}\n", 7, "trials.stop_grace_s",
         ">= 0", "-1"),
    case("trainer-missing", BASE.replace("trainer:\n  config: {epochs: 1}\n", ""), 1, "trainer",
         "missing required section 'trainer'"),
    case("trainer-both",
         BASE.replace("  config: {epochs: 1}", "  config: {}\n  config_file: t.yaml"), 5,
         "trainer.config_file", "not both"),
    case("trainer-neither", BASE.replace("  config: {epochs: 1}", "  entrypoint: a.b:c"), 3,
         "trainer", "needs config", "or config_file"),
    case("trainer-file-missing", BASE.replace("  config: {epochs: 1}", "  config_file: nope.yaml"),
         4, "trainer.config_file", "no such file: 'nope.yaml'"),
    case("trainer-entrypoint",
         BASE.replace("  config: {epochs: 1}", "  entrypoint: mymod.run\n  config: {}"), 4,
         "trainer.entrypoint", "'package.module:function'", "'mymod.run'"),
    case("trainer-config-key",
         BASE.replace("  config: {epochs: 1}", "  config:\n    optim:\n      lr: 0.1"), 6,
         "trainer.config.optim.lr", "unknown key 'lr'", "did you mean 'optim_args.lr'?"),
    case("trainer-config-value", BASE.replace("{epochs: 1}", "{epochs: 0}"), 4,
         "trainer.config.epochs", "expected >= 1, got 0"),
    case("trainer-config-type", BASE.replace("{epochs: 1}", "{data: {batch_size: many}}"), 4,
         "trainer.config.data.batch_size", "expected int, got 'many'"),
    case("trainer-schema-missing",
         BASE.replace("  config: {epochs: 1}", "  schema: json:NoSuch\n  config: {}"), 4,
         "trainer.schema", "'json' has no 'NoSuch'"),
    case("space-missing", BASE.split("search_space:")[0], 1, "search_space",
         "missing required section 'search_space'"),
    case("space-not-list", BASE.replace(DIM_LINE, "  lr: 1"), 5, "search_space",
         "must be a list of dimensions", "got {'lr': 1} (dict)"),
    case("space-empty", BASE.replace("search_space:\n" + DIM_LINE, "search_space: []"), 5,
         "search_space", "at least one dimension"),
    case("dim-unknown-key",
         with_dim("{name: lr, path: optim.optim_args.lr, kind: float, lw: 0.1, high: 1}"), 6,
         "search_space[0].lw", "unknown key 'lw' in a dimension", "did you mean 'low'?"),
    case("dim-kind", DIM_LINE.join(BASE.split(DIM_LINE)).replace("kind: float", "kind: flot"), 6,
         "search_space[0].kind", "got 'flot'", "did you mean 'float'?"),
    case("dim-no-kind", with_dim("{name: lr, path: optim.optim_args.lr, low: 0.1, high: 1}"), 6,
         "search_space[0]", "needs 'kind'"),
    case("dim-no-path", with_dim("{name: lr, kind: float, low: 0.1, high: 1}"), 6,
         "search_space[0]", "needs 'path'"),
    case("dim-path-segment", BASE.replace("optim.optim_args.lr", "optim.optimargs.lr"), 6,
         "search_space[0].path", "'optim.optimargs.lr' is not in the trainer config",
         "no field 'optimargs' in optim", "did you mean 'optim_args'?"),
    case("dim-path-top", BASE.replace("optim.optim_args.lr", "optm.lr"), 6, "search_space[0].path",
         "did you mean 'optim'?"),
    case("dim-path-section",
         with_dim("{name: m, path: model, kind: categorical, choices: [a, b]}"), 6,
         "search_space[0].choices[0]", "model takes a mapping (ModelConfig)"),
    case("dim-low-gt-high", BASE.replace("high: 0.1", "high: 1.0e-5"), 6, "search_space[0].low",
         "low must be <= high", "low=0.0001, high=1e-05"),
    case("dim-log-low-zero", BASE.replace("low: 1.0e-4", "low: 0"), 6, "search_space[0].low",
         "log sampling needs low > 0, got low=0"),
    case("dim-step-and-log", BASE.replace("log: true", "log: true, step: 0.01"), 6,
         "search_space[0].step", "step and log cannot be used together", "step=0.01"),
    case("dim-int-float-bound",
         with_dim("{name: e, path: epochs, kind: int, low: 1.0, high: 3}"), 6,
         "search_space[0].low", "int bounds must be integers, got 1.0 (float); write 1"),
    case("dim-int-log-step",
         with_dim("{name: e, path: epochs, kind: int, low: 1, high: 9, step: 2, log: true}"), 6,
         "search_space[0].step", "step and log cannot be used together", "step=2"),
    case("dim-float-into-int",
         with_dim("{name: e, path: epochs, kind: float, low: 1, high: 3}"), 6,
         "search_space[0].low", "produces 1.0", "epochs takes int", "use kind: int"),
    case("dim-config-rule", with_dim("{name: e, path: epochs, kind: int, low: 0, high: 3}"), 6,
         "search_space[0].low", "can produce 0", "epochs: expected >= 1, got 0"),
    case("dim-config-rule-high",
         with_dim("{name: v, path: data.val_fraction, kind: float, low: 0.1, high: 1.0}"), 6,
         "search_space[0].high", "can produce 1.0", "expected 0 < val_fraction < 1"),
    case("dim-literal",
         with_dim("{name: a, path: precision.amp_dtype, kind: categorical, choices: [bf16, fp8]}"),
         6, "search_space[0].choices[1]", "produces 'fp8'", "one of 'fp16', 'bf16', 'fp32'"),
    case("dim-choice-type",
         with_dim("{name: w, path: model.kwargs.w, kind: categorical, choices: [1, [2, 3]]}"),
         6, "search_space[0].choices[1]", "each choice must be null, a boolean", "[2, 3] (list)"),
    case("dim-choices-empty",
         with_dim("{name: w, path: model.kwargs.w, kind: categorical, choices: []}"), 6,
         "search_space[0].choices", "non-empty list"),
    case("dim-choice-duplicate",
         with_dim("{name: w, path: model.kwargs.w, kind: categorical, choices: [1, 2, 1]}"), 6,
         "search_space[0].choices[2]", "duplicate choice 1 (also choices[0])"),
    case("dim-bool-with-low", with_dim("{name: e, path: ema.enabled, kind: bool, low: 0}"), 6,
         "search_space[0].low", "'low' does not apply to kind 'bool'"),
    case("dim-categorical-with-low",
         with_dim("{name: w, path: model.kwargs.w, kind: categorical, choices: [1], high: 2}"),
         6, "search_space[0].high", "'high' does not apply to kind 'categorical'", "takes choices"),
    case("dim-duplicate-name",
         BASE + "  - {name: lr, path: optim.weight_decay, kind: float, low: 0, high: 0.1}\n", 7,
         "search_space[1].name", "duplicate dimension name 'lr' (also search_space[0])"),
    case("dim-duplicate-path",
         BASE + "  - {name: lr2, path: optim.optim_args.lr, kind: float, low: 0.1, high: 0.2}\n", 7,
         "search_space[1].path", "is the same as search_space[0].path"),
    case("dim-overlapping-path",
         BASE + "  - {name: o, path: optim.optim_args, kind: categorical, choices: [null]}\n", 7,
         "search_space[1].path", "overlaps search_space[0].path"),
    case("when-later",
         more_dims(decay_when("{e: true}"),
                   "{name: e, path: ema.enabled, kind: bool}"),
         7, "search_space[1].when.e", "refers to 'e', which is defined later"),
    case("when-unknown",
         more_dims(decay_when("{lrr: 0.1}")),
         7, "search_space[1].when.lrr", "unknown dimension 'lrr'", "did you mean 'lr'?"),
    case("when-continuous",
         more_dims(decay_when("{lr: 0.1}")),
         7, "search_space[1].when.lr", "continuous float dimension"),
    case("when-impossible-value",
         more_dims("{name: w, path: model.kwargs.w, kind: categorical, choices: [16, 32]}",
                   decay_when("{w: [16, 48]}")),
         8, "search_space[2].when.w[1]", "'w' never takes 48 (int)", "one of [16, 32]"),
    case("when-bool-not-int",
         more_dims("{name: e, path: ema.enabled, kind: bool}",
                   decay_when("{e: 1}")),
         8, "search_space[2].when.e", "'e' never takes 1 (int)", "true or false"),
    case("batch-path", BASE + "batch_size:\n  auto: true\n  path: data.batchsize\n", 9,
         "batch_size.path", "no field 'batchsize' in data", "did you mean 'batch_size'?"),
    case("batch-path-searched", BASE + "batch_size: {auto: true, path: optim.optim_args.lr}\n", 7,
         "batch_size.path", "also search_space[0].path"),
    case("batch-path-not-int", BASE + "batch_size: {auto: true, path: optim.weight_decay}\n", 7,
         "batch_size.path", "must be an integer field", "takes float"),
    case("batch-max-below-min", BASE + "batch_size:\n  min: 64\n  max: 32\n", 9, "batch_size.max",
         "an integer >= 64, got 32"),
    case("batch-start-out-of-range", BASE + "batch_size: {min: 8, max: 32, start: 64}\n", 7,
         "batch_size.start", "in [min, max] = [8, 32]"),
    case("batch-tolerance", BASE + "batch_size: {tolerance: 0.7}\n", 7, "batch_size.tolerance",
         "a number > 0 and <= 0.5, got 0.7"),
    case("batch-multiple", BASE + "batch_size: {min: 9, max: 15, multiple_of: 16}\n", 7,
         "batch_size.multiple_of", "no multiple of 16 lies in [min, max] = [9, 15]"),
    case("batch-memory-key", BASE + "batch_size:\n  memory_keys:\n    - model.buildr\n", 9,
         "batch_size.memory_keys[0]", "memory key 'model.buildr'", "did you mean 'builder'?"),
    case("batch-effective-no-auto", BASE + "batch_size: {effective: 256}\n", 7,
         "batch_size.effective", "needs batch_size.auto: true"),
    case("tracking-key", BASE + "tracking:\n  mlfow: {experiment: x}\n", 8, "tracking.mlfow",
         "did you mean 'mlflow'?"),
    case("tracking-value", BASE + "tracking:\n  mlflow: {experiment: 3}\n", 8,
         "tracking.mlflow.experiment", "got 3 (int)"),
    case("set-unknown-key", BASE, None, "study.n_trails", "unknown key 'n_trails'",
         "did you mean 'n_trials'?", overrides=["study.n_trails=3"], file=SET),
    case("set-bad-value", BASE, None, "study.n_trials", "integer >= 1 or null, got -2",
         overrides=["study.n_trials=-2"], file=SET),
    case("set-index-range", BASE, None, "search_space[3]", "index 3 is out of range", "1 item",
         overrides=["search_space[3].high=3"], file=SET),
    case("set-config-key", BASE, None, "trainer.config.epoch", "did you mean 'epochs'?",
         overrides=["trainer.config.epoch=3"], file=SET),
    case("set-no-equals", BASE, None, None, "expected PATH=VALUE", overrides=["study.n_trials"],
         file=SET),
    case("set-section", BASE, None, "stdy", "did you mean 'study'?", overrides=["stdy.name=x"],
         file=SET),
    case("set-through-scalar", BASE, None, "study.name", "is 's' (str), not a mapping",
         overrides=["study.name.x=1"], file=SET),
    case("set-bad-yaml", BASE, None, "study.n_trials", "not valid YAML",
         overrides=["study.n_trials=[1"], file=SET),
]
# fmt: on


@pytest.mark.parametrize(("text", "overrides", "file", "line", "field", "contains", "absent"), BAD)
def test_bad_study_file(
    write: Callable[..., Path],
    text: str,
    overrides: list[str],
    file: str | None,
    line: int | None,
    field: str | None,
    contains: list[str],
    absent: list[str],
) -> None:
    path = write(text)
    with pytest.raises(SpecError) as info:
        load_spec(path, overrides)
    err = info.value
    message = str(err)
    expected_file = file if file is not None else str(path)
    assert (err.file, err.line, err.field) == (expected_file, line, field), message
    where = expected_file + (f":{line}" if line is not None else "")
    assert message.startswith(where + (f": {field}: " if field else ": ")), message
    for part in contains:
        assert part in message, message
    for part in absent:
        assert part not in message, message


def test_at_least_25_bad_files() -> None:
    assert len(BAD) >= 25
    assert len({case.id for case in BAD}) == len(BAD)


def test_unreadable_study_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"nope\.yaml: cannot read the study file"):
        load_spec(tmp_path / "nope.yaml")


@pytest.mark.skipif(os.name != "posix", reason="POSIX paths")
def test_message_uses_the_path_as_given(
    write: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(study_with("  n_trials: 0"))
    monkeypatch.chdir(path.parent)
    with pytest.raises(SpecError) as info:
        load_spec("study.yaml")
    assert str(info.value).startswith("study.yaml:3: study.n_trials: ")


def test_builtin_trainer_batch_size_path_is_fixed(write: Callable[..., Path]) -> None:
    # A custom path would pass the schema checks, but the built-in trainer only reads
    # data.batch_size: the found size would be written where nothing uses it.
    path = write(BASE + "batch_size: {auto: true, path: epochs}\n")
    with pytest.raises(SpecError, match="built-in trainer uses 'data.batch_size'") as info:
        load_spec(path)
    assert info.value.field == "batch_size.path"
