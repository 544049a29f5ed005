"""Seeding: ``study.enqueue`` and ``study.warm_start`` run first, once per study."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest

from dvt_hpo.budget.trials import PRIOR_ATTR
from dvt_hpo.exceptions import SpecError
from dvt_hpo.store import compat
from dvt_hpo.study import seeding
from dvt_hpo.study.loop import StudyRunner
from dvt_hpo.studyfile import load_spec
from tests.conftest import toy_study
from tests.orchestrator import Orchestrator, load_trials

optuna.logging.set_verbosity(optuna.logging.WARNING)
X = optuna.distributions.FloatDistribution(0.0, 1.0)


def _run(spec: object) -> tuple[optuna.Study, list[str]]:
    lines: list[str] = []
    runner = StudyRunner(spec, out=lines.append)  # type: ignore[arg-type]
    return runner.run(), lines


@pytest.mark.processes
def test_enqueued_configs_run_first_and_once(write_study: Callable[..., Path]) -> None:
    doc = toy_study("seeded", study={"n_trials": 3, "enqueue": [{"x": 0.125}, {"x": 0.75}]})
    spec = load_spec(write_study(doc))
    study, lines = _run(spec)
    params = [t.params["x"] for t in sorted(study.trials, key=lambda t: t.number)]
    assert params[:2] == [0.125, 0.75], lines
    assert any(line.startswith("seeded: 2 from study.enqueue") for line in lines), lines
    # A resume with more trials does not enqueue them again.
    more = load_spec(spec.path, ["study.n_trials=5"])
    study, lines = _run(more)
    xs = [t.params["x"] for t in study.trials]
    assert xs.count(0.125) == 1 and xs.count(0.75) == 1 and len(xs) == 5, lines
    assert not any(line.startswith("seeded") for line in lines)


@pytest.mark.processes
def test_workers_starting_together_enqueue_once(
    write_study: Callable[..., Path], unique_name: str, postgres_url: str
) -> None:
    seeds = [{"x": 0.1}, {"x": 0.2}, {"x": 0.3}]
    doc = toy_study(unique_name, study={"n_trials": 4, "storage": postgres_url, "enqueue": seeds})
    study = write_study(doc)
    code, out = Orchestrator(study, "--workers", "3").finish()
    assert code == 0, out
    # Workers that lost the race for the last trial closed their extra ask (no params).
    xs = [t.params["x"] for t in load_trials(study) if t.state.name == "COMPLETE"]
    assert len(xs) == 4 and all(xs.count(s["x"]) == 1 for s in seeds), out


def _earlier(url: str, spec: object, *, objective: dict | None = None) -> None:
    """An earlier study 'old' whose value is x (best: the largest x)."""
    old = optuna.create_study(storage=url, study_name="old", direction="maximize")
    mine = compat.settings_attrs(spec)[compat.ATTR_PREFIX + "objective"]  # type: ignore[arg-type]
    old.set_user_attr(compat.ATTR_PREFIX + "objective", objective or mine)
    for x in (0.95, 0.7, 0.6, 0.1):
        old.add_trial(optuna.trial.create_trial(params={"x": x}, distributions={"x": X}, value=x))
    old.add_trial(
        optuna.trial.create_trial(
            params={"x": 0.8}, distributions={"x": X}, state=optuna.trial.TrialState.FAIL
        )
    )


@pytest.mark.processes
def test_warm_start_enqueues_the_best_that_fit_and_copies_results(
    write_study: Callable[..., Path],
) -> None:
    doc = toy_study(
        "new",
        study={"n_trials": 2, "warm_start": {"study": "old", "top": 2, "copy_results": True}},
        search_space=[{"name": "x", "path": "x", "kind": "float", "low": 0.0, "high": 0.9}],
    )
    spec = load_spec(write_study(doc))
    _earlier(spec.study.storage, spec)
    study, lines = _run(spec)
    trials = sorted(study.trials, key=lambda t: t.number)
    copied = [t for t in trials if t.system_attrs.get(PRIOR_ATTR)]
    ran = [t for t in trials if not t.system_attrs.get(PRIOR_ATTR)]
    # 0.95 no longer fits [0, 0.9]: left out, and the next best takes its place.
    assert [t.params["x"] for t in ran] == [0.7, 0.6], lines
    assert any("left out: trial 0 (x=0.95 must be in [0.0, 0.9])" in line for line in lines)
    # Its COMPLETE trials that fit, for the sampler; not counted in n_trials (2 ran).
    assert sorted(t.params["x"] for t in copied) == [0.1, 0.6, 0.7], lines
    assert all(not t.intermediate_values for t in copied)
    assert any("2 complete, 3 copied from an earlier study (not counted)" in x for x in lines)


def test_copy_results_needs_the_same_objective(write_study: Callable[..., Path]) -> None:
    doc = toy_study("new", study={"warm_start": {"study": "old", "copy_results": True}})
    spec = load_spec(write_study(doc))
    _earlier(spec.study.storage, spec, objective={"metric": "loss", "direction": "minimize"})
    with pytest.raises(SpecError, match="another objective") as info:
        seeding.read_warm_start(spec)
    assert info.value.field == "study.warm_start.copy_results"
    # Without copy_results its best configs are still enqueued.
    plain = load_spec(spec.path, ["study.warm_start.copy_results=false"])
    assert [p for p, _ in seeding.read_warm_start(plain).configs][:2] == [{"x": 0.95}, {"x": 0.7}]


def test_the_earlier_storage_password_is_never_shown(write_study: Callable[..., Path]) -> None:
    url = "postgresql://someone:hunter2@127.0.0.1:1/nothing"
    doc = toy_study("new", study={"warm_start": {"study": "old", "storage": url}})
    spec = load_spec(write_study(doc))
    with pytest.raises(SpecError) as info:
        seeding.read_warm_start(spec)
    assert "hunter2" not in str(info.value) and "cannot read the earlier study" in str(info.value)


def test_a_missing_earlier_database_is_named_at_warm_start_storage(
    write_study: Callable[..., Path], tmp_path: Path
) -> None:
    """The earlier study's database, not this study's: no advice to run this study first."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    doc = toy_study("new", study={"warm_start": {"study": "old", "storage": url}})
    spec = load_spec(write_study(doc))
    with pytest.raises(SpecError) as info:
        seeding.read_warm_start(spec)
    assert info.value.field == "study.warm_start.storage", str(info.value)
    assert f"no database at {tmp_path / 'old.db'}; set study.warm_start.storage" in str(info.value)
    assert "study.storage" not in str(info.value).replace("warm_start.storage", "")
    assert "dvt-hpo run" not in str(info.value)
    assert not (tmp_path / "old.db").exists()


def test_a_worker_killed_before_the_mark_leaves_nothing_twice(
    write_study: Callable[..., Path],
) -> None:
    spec = load_spec(write_study(toy_study("m", study={"enqueue": [{"x": 0.5}, {"x": 0.25}]})))
    study = optuna.create_study(storage=spec.study.storage, study_name="m")
    storage, sid = study._storage, study._study_id

    def seed() -> None:
        seeding.seed_study(study, storage, sid, spec, contextlib.nullcontext, print)

    seed()
    seed()  # marked: nothing again
    assert storage.get_study_system_attrs(sid)[seeding.SEEDED_ATTR] == {
        "enqueue": 2,
        "warm_start": 0,
        "copied": 0,
    }
    # Killed after enqueuing, before the mark: the next worker enqueues nothing twice.
    storage.set_study_system_attr(sid, seeding.SEEDED_ATTR, False)
    seed()
    # WAITING: the enqueued params are Optuna's fixed_params until a worker asks.
    assert sorted(t.system_attrs["fixed_params"]["x"] for t in study.trials) == [0.25, 0.5]
