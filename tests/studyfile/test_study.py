"""Sections study (storage, sampler, pruner, budget), objective and tracking."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest

from dvt_hpo.exceptions import SpecError
from dvt_hpo.sampling.kinds import SHORT_CURVE_EPOCHS, default_algorithms
from dvt_hpo.sampling.mf_gp import MultiFidelityGPSampler
from dvt_hpo.sampling.wilcoxon import WilcoxonPruner
from dvt_hpo.sampling.wilcoxon_halving import WilcoxonHalvingPruner
from dvt_hpo.studyfile import (
    PlateauSpec,
    SamplerSpec,
    build_pruner,
    build_sampler,
    load_spec,
)
from tests.studyfile.helpers import (
    BASE,
    bad_file_test,
    case,
    study_with,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)


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


def test_max_failures_share_is_of_n_trials(write: Callable[..., Path]) -> None:
    spec = load_spec(write(study_with("  n_trials: 10", "  max_failures: 0.3")))
    assert spec.study.max_failures == 0.3 and spec.study.n_trials == 10
    assert load_spec(write(study_with("  max_failures: 3"))).study.max_failures == 3
    with pytest.raises(SpecError, match=r"a share of study.n_trials: the run stops after"):
        load_spec(write(study_with("  n_trials: 10", "  max_failures: 1.5")))


def test_defaults_are_filled_once_by_the_spec(write: Callable[..., Path], tmp_path: Path) -> None:
    spec = load_spec(write(study_with("  heartbeat_interval_s: 4")))
    assert spec.study.grace_period_s == 8 and isinstance(spec.study.grace_period_s, int)
    spec = load_spec(write(study_with("  grace_period_s: null")))
    assert spec.study.grace_period_s == 20
    assert spec.trials.runs_dir == tmp_path.resolve() / "runs" / "s"
    assert spec.trials.runs_dir.is_absolute()
    # TPE samples parallel trials with constant_liar unless the study says otherwise (the
    # default GP counts running trials itself).
    parallel = BASE + "trials: {parallel: 2}\n"
    uni_ce = {"multivariate": False, "consider_endpoints": True}
    constrained = parallel + "objective: {metric: loss, constraints: [{metric: m, max: 1}]}\n"
    assert load_spec(write(constrained)).study.sampler.kwargs == {**uni_ce, "constant_liar": True}
    for epochs in (1, 52):
        long = parallel.replace("config: {epochs: 1}", f"config: {{epochs: {epochs}}}")
        assert load_spec(write(long)).study.sampler.kwargs == {}
    spec = load_spec(write(parallel), ["study.sampler=tpe"])
    assert spec.study.sampler.kwargs == {"constant_liar": True}
    spec = load_spec(write(parallel), ["study.sampler={kind: tpe, constant_liar: false}"])
    assert spec.study.sampler.kwargs == {"constant_liar": False}
    assert load_spec(write(BASE)).study.sampler.kwargs == {}


# fmt: off
BAD_STUDY = [
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
    case("max-failures-share-without-n-trials", study_with("  max_failures: 0.5"), 3,
         "study.max_failures", "a share (0.5) is a share of study.n_trials, which is null",
         "an integer >= 1"),
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
    case("plateau-trials-zero", study_with("  plateau: {trials: 0}"), 3, "study.plateau.trials",
         "must be an integer >= 1", "got 0"),
    case("plateau-trials-missing", study_with("  plateau: {min_delta: 0.1}"), 3,
         "study.plateau.trials", "missing required key 'trials'"),
    case("plateau-delta-negative", study_with("  plateau: {trials: 5, min_delta: -0.1}"), 3,
         "study.plateau.min_delta", "must be a number >= 0", "got -0.1"),
    case("plateau-key", study_with("  plateau: {trials: 5, mindelta: 0.1}"), 3,
         "study.plateau.mindelta", "did you mean 'min_delta'?"),
    case("plateau-not-mapping", study_with("  plateau: 5"), 3, "study.plateau",
         "must be a mapping", "got 5 (int)"),
    case("plateau-multi-objective",
         study_with("  plateau: {trials: 5}")
         + "objective: {metrics: [{name: loss}, {name: accuracy}]}\n", 3,
         "study.plateau", "several objectives"),
    case("objective-direction", BASE + "objective:\n  direction: maximise\n", 8,
         "objective.direction", "must be one of minimize, maximize", "did you mean 'maximize'?"),
    case("objective-reduce", BASE + "objective: {reduce: mean}\n", 7, "objective.reduce",
         "must be one of best, last, got 'mean'"),
    case("tracking-key", BASE + "tracking:\n  mlfow: {experiment: x}\n", 8, "tracking.mlfow",
         "did you mean 'mlflow'?"),
    case("tracking-value", BASE + "tracking:\n  mlflow: {experiment: 3}\n", 8,
         "tracking.mlflow.experiment", "got 3 (int)"),
]
# fmt: on


test_bad_study_objective_tracking = bad_file_test(BAD_STUDY)


def test_storage_and_tracking_uri_expand_environment_variables(
    write_study, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dvt_hpo.exceptions import SpecError
    from dvt_hpo.studyfile import load_spec, spec_to_dict
    from tests.conftest import toy_study

    doc = toy_study(
        "env-study",
        study={"storage": "${DVT_TEST_DB_URL}"},
        tracking={"mlflow": {"tracking_uri": "${DVT_TEST_MLFLOW:-sqlite:///mlflow.db}"}},
    )
    path = write_study(doc)
    monkeypatch.delenv("DVT_TEST_DB_URL", raising=False)
    with pytest.raises(SpecError, match=r"DVT_TEST_DB_URL is not set") as info:
        load_spec(path)
    assert info.value.field == "study.storage" and info.value.line is not None
    monkeypatch.setenv("DVT_TEST_DB_URL", "postgresql://hpo:s3cret@db.example/hpo")
    spec = load_spec(path)
    assert spec.study.storage == "postgresql://hpo:s3cret@db.example/hpo"
    assert spec.tracking.mlflow.tracking_uri == f"sqlite:///{path.parent.resolve() / 'mlflow.db'}"
    assert "s3cret" not in str(spec_to_dict(spec))


def test_plateau_is_read_with_its_default_min_delta(write: Callable[..., Path]) -> None:
    spec = load_spec(write(study_with("  plateau: {trials: 20}")))
    assert spec.study.plateau == PlateauSpec(trials=20, min_delta=0.0)
    spec = load_spec(write(study_with("  plateau: {trials: 5, min_delta: 1}")))
    assert spec.study.plateau == PlateauSpec(trials=5, min_delta=1.0)
    assert load_spec(write(study_with("  plateau: null"))).study.plateau is None
    assert load_spec(write(BASE)).study.plateau is None


def test_no_sampler_or_pruner_gets_the_measured_default(write: Callable[..., Path]) -> None:
    # Long curves (more than SHORT_CURVE_EPOCHS epochs): the GP and Wilcoxon.
    spec = load_spec(write(BASE.replace("config: {epochs: 1}", "config: {epochs: 52}")))
    DEFAULT_SAMPLER, DEFAULT_PRUNER = default_algorithms()  # noqa: N806
    assert (spec.study.sampler.kind, spec.study.sampler.kwargs) == (
        DEFAULT_SAMPLER.kind,
        DEFAULT_SAMPLER.kwargs,
    )
    # The loader adds max_resource (epochs - 1): no test at the last report.
    assert (spec.study.pruner.kind, spec.study.pruner.kwargs) == (
        DEFAULT_PRUNER.kind,
        {**DEFAULT_PRUNER.kwargs, "max_resource": 51},
    )
    assert isinstance(build_sampler(spec.study.sampler, spec.search_space), MultiFidelityGPSampler)
    assert isinstance(build_pruner(spec.study.pruner), WilcoxonPruner)


def test_short_curves_get_the_gp_without_pruning(write: Callable[..., Path]) -> None:
    short = BASE.replace("config: {epochs: 1}", f"config: {{epochs: {SHORT_CURVE_EPOCHS}}}")
    sampler, pruner = default_algorithms(epochs=1)
    for text in (BASE, short):
        spec = load_spec(write(text))
        assert spec.study.sampler == sampler and sampler.kind == "mf_gp"
        assert spec.study.pruner == pruner and pruner.kind == "none"
        assert isinstance(build_pruner(spec.study.pruner), optuna.pruners.NopPruner)
    # A file that does not say how many epochs gets the long curves' pruner.
    unsaid = load_spec(write(BASE.replace("config: {epochs: 1}", "config: {}")))
    long_sampler, long_pruner = default_algorithms()
    assert unsaid.study.sampler == long_sampler and unsaid.study.pruner.kind == long_pruner.kind


def test_a_constrained_study_gets_a_sampler_that_reads_constraints(
    write: Callable[..., Path],
) -> None:
    text = BASE + "objective: {metric: loss, constraints: [{metric: n_params, max: 1.0e6}]}\n"
    spec = load_spec(write(text))
    sampler = build_sampler(spec.study.sampler, spec.search_space, constrained=True)
    assert isinstance(sampler, optuna.samplers.TPESampler) and not sampler._multivariate
    assert sampler._parzen_estimator_parameters.consider_endpoints
    # The rungs stop below the trainer's last epoch (BASE trains 1: at least 1).
    assert spec.study.pruner.kwargs == {"max_resource": 1}
    assert isinstance(build_pruner(spec.study.pruner), WilcoxonHalvingPruner)


_TPE_UNI_CE = {"multivariate": False, "consider_endpoints": True}


@pytest.mark.parametrize(
    ("lines", "sampler", "pruner"),
    [
        # Arguments without a kind go over the default's.
        # (BASE trains 1 epoch: the short-curve default, the GP without pruning.)
        (["  sampler: {seed: 3}"], ("mf_gp", {"seed": 3}), None),
        (["  sampler: null"], ("mf_gp", {}), None),
        # A kind named in the file is Optuna's class with the file's arguments only.
        (["  sampler: tpe"], ("tpe", {}), None),
        (["  sampler: {kind: tpe, seed: 1}"], ("tpe", {"seed": 1}), None),
        (["  pruner: median"], None, ("median", {})),
        (["  pruner: null"], None, ("none", {})),
    ],
)
def test_the_default_kind_keeps_its_arguments_under_the_files(
    write: Callable[..., Path],
    lines: list[str],
    sampler: tuple[str, dict] | None,
    pruner: tuple[str, dict] | None,
) -> None:
    spec = load_spec(write(study_with(*lines)))
    if sampler is not None:
        assert (spec.study.sampler.kind, spec.study.sampler.kwargs) == sampler
    if pruner is not None:
        assert (spec.study.pruner.kind, spec.study.pruner.kwargs) == pruner


def test_several_objectives_keep_their_own_defaults(write: Callable[..., Path]) -> None:
    spec = load_spec(write(BASE + "objective: {metrics: [{name: loss}, {name: accuracy}]}\n"))
    assert (spec.study.sampler.kind, spec.study.pruner.kind) == ("nsga2", "none")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # trainer.config.epochs (BASE has epochs: 1; min_resource must stay below it).
        (study_with("  pruner: hyperband").replace("epochs: 1", "epochs: 12"), 12),
        # An epochs dimension: its largest value.
        (
            study_with("  pruner: hyperband").replace("epochs: 1", "epochs: 5")
            + "  - {name: epochs, path: epochs, kind: int, low: 2, high: 40}\n",
            40,
        ),
        # Given in the file: kept, "auto" included.
        (study_with("  pruner: {kind: hyperband, max_resource: 7}"), 7),
        (study_with("  pruner: {kind: hyperband, max_resource: auto}"), "auto"),
        # Not above min_resource: left to Optuna's own estimate.
        (study_with("  pruner: {kind: hyperband, min_resource: 3}"), None),
    ],
)
def test_hyperband_max_resource_comes_from_the_trainers_epochs(
    write: Callable[..., Path], text: str, expected: object
) -> None:
    pruner = load_spec(write(text)).study.pruner
    assert pruner.kind == "hyperband"
    assert pruner.kwargs.get("max_resource") == expected
    built = build_pruner(pruner)
    if isinstance(expected, int):
        assert built._max_resource == expected


def test_an_argument_the_default_does_not_take_names_the_kinds_that_do(
    write: Callable[..., Path],
) -> None:
    """Arguments without a kind go over the default's, which follows the training's length: a
    short one's default prunes nothing, so a Wilcoxon argument names the kinds that take it."""
    with pytest.raises(SpecError) as caught:
        load_spec(write(study_with("  pruner: {p_threshold: 0.05}")))
    message = str(caught.value)
    assert "the default pruner of this study, kind 'none'" in message
    assert message.endswith("name a kind that takes it: wilcoxon, wilcoxon_halving")
