"""``trials.pause`` in the study's storage: which paused trial continues (one copy, whoever
races for it), how it counts, which state is evicted, and that every state goes at the end."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from dvt_hpo.budget.ledger import Ledger
from dvt_hpo.budget.trials import within_retries
from dvt_hpo.recovery import pause, resume, retries
from dvt_hpo.spec.model import StudySpec
from dvt_hpo.studyfile import load_spec
from tests.conftest import toy_study
from tests.orchestrator import EVENT_TIMEOUT_S

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def spec_of(tmp_path: Path, **trials: Any) -> StudySpec:
    doc = toy_study(
        "paused",
        study={"pruner": {"kind": "successive_halving", "reduction_factor": 2}},
        trials={"pause": True, **trials},
    )
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_spec(path)


def paused_trial(
    study: optuna.Study, spec: StudySpec, x: float, curve: dict[int, float], *, state: bool = True
) -> int:
    """An attempt that reported ``curve`` and was paused, with a state kept when ``state``."""
    trial = study.ask()
    trial.suggest_float("x", x, x)
    for step, value in curve.items():
        trial.report(value, step)
    pause.mark(study._storage, trial._trial_id)
    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    if state:
        frozen = study._storage.get_trial(trial._trial_id)
        plan, _ = resume.prepare(
            spec, study._storage, study._study_id, trial._trial_id, frozen.params
        )
        (plan.state_dir / "state.pt").write_bytes(b"0" * 1000 * (trial.number + 1))
    return trial.number


def complete(study: optuna.Study, x: float, curve: dict[int, float]) -> int:
    trial = study.ask()
    trial.suggest_float("x", x, x)
    for step, value in curve.items():
        trial.report(value, step)
    study.tell(trial, curve[max(curve)])
    return trial.number


@pytest.fixture
def setup(tmp_path: Path) -> tuple[optuna.Study, StudySpec]:
    spec = spec_of(tmp_path)
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'study.db'}")
    return optuna.create_study(storage=storage, study_name="paused", direction="maximize"), spec


def waiting(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(states=(optuna.trial.TrialState.WAITING,))


def test_the_promotable_paused_trial_gets_one_copy_that_takes_its_place(
    setup: tuple[optuna.Study, StudySpec],
) -> None:
    study, spec = setup
    keeper = pause.Paused(spec)
    complete(study, 0.9, {1: 0.9, 3: 0.95})
    second = paused_trial(study, spec, 0.5, {1: 0.8})
    assert keeper.continue_paused(study, contextlib.nullcontext) is None  # floor(2 / 2) = 1
    paused_trial(study, spec, 0.1, {1: 0.2})
    paused_trial(study, spec, 0.2, {1: 0.3})
    assert keeper.continue_paused(study, contextlib.nullcontext) == second
    (copy,) = waiting(study)
    assert copy.params == {"x": 0.5}
    assert retries.retry_history(copy) == [second]
    # Its copy is its latest attempt: it is no longer paused, and never continued twice.
    assert keeper.continue_paused(study, contextlib.nullcontext) is None
    # n_trials: the paused trial and its copy are one trial.
    ledger = Ledger(study, study._storage, study._study_id)
    ledger.refresh()
    assert ledger.used() == 4
    assert retries.counted_numbers(study.get_trials()) == {0, 2, 3, copy.number}


def test_a_state_of_another_config_is_never_continued(
    setup: tuple[optuna.Study, StudySpec], tmp_path: Path
) -> None:
    study, spec = setup
    complete(study, 0.9, {1: 0.9})
    for x, value in ((0.5, 0.8), (0.1, 0.2), (0.2, 0.3)):
        paused_trial(study, spec, x, {1: value})
    changed = load_spec(spec.path, ["trainer.config.curve=[0.5, 0.6, 0.7]"])
    assert pause.Paused(changed).continue_paused(study, contextlib.nullcontext) is None
    assert pause.Paused(spec).continue_paused(study, contextlib.nullcontext) == 1


def test_pauses_never_use_up_the_retries_of_an_interrupted_continuation() -> None:
    # A chain paused twice, then interrupted, with max_retries 1: its copy is made.
    assert within_retries(copies=2, machine_copies=0, machine=False, max_retries=1, pauses=2)
    assert not within_retries(copies=3, machine_copies=0, machine=False, max_retries=1, pauses=2)


@pytest.mark.parametrize(
    ("limits", "kept"),
    [({"max_count": 2, "max_bytes": None}, {1, 3}), ({"max_count": None, "max_bytes": 4500}, {1})],
    ids=["count", "bytes"],
)
def test_eviction_keeps_the_most_promising_within_the_limits(
    setup: tuple[optuna.Study, StudySpec], limits: dict[str, Any], kept: set[int]
) -> None:
    study, spec = setup
    complete(study, 0.9, {1: 0.9})
    for x, value in ((0.5, 0.8), (0.1, 0.2), (0.2, 0.7)):  # trials 1, 2, 3: 2000..4000 bytes
        paused_trial(study, spec, x, {1: value})
    evicted = pause.enforce_limits(spec, study.get_trials(), maximize=True, eta=2, **limits)
    states = pause.paused_states(spec, study.get_trials())
    assert {p.number for p in states} == kept
    assert set(evicted) == {1, 2, 3} - kept
    # The evicted stay PRUNED; nothing continues them.
    assert all(study.trials[n].state.name == "PRUNED" for n in evicted)


def test_every_state_goes_when_the_study_ends(setup: tuple[optuna.Study, StudySpec]) -> None:
    study, spec = setup
    numbers = [paused_trial(study, spec, x, {0: x}) for x in (0.1, 0.2, 0.3)]
    assert [p.number for p in pause.paused_states(spec, study.get_trials())] == numbers
    assert pause.discard_all(spec, study.get_trials()) == numbers
    assert not any(resume.resume_root(spec).iterdir())


def _continue_racer(url: str, name: str, path: str, barrier: Any, out: Any) -> None:
    from dvt_hpo.store.lock import retry_lock

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(url)
    study = optuna.load_study(study_name=name, storage=storage)
    study_id = storage.get_study_id_from_name(name)
    keeper = pause.Paused(load_spec(Path(path)))
    barrier.wait()
    out.put(keeper.continue_paused(study, lambda: retry_lock(url, study_id)))


@pytest.mark.processes
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_workers_racing_for_a_paused_trial_continue_it_once(
    tmp_path: Path, request: pytest.FixtureRequest, unique_name: str, backend: str
) -> None:
    import multiprocessing

    spec = spec_of(tmp_path)
    url = (
        f"sqlite:///{tmp_path}/race.db"
        if backend == "sqlite"
        else str(request.getfixturevalue("postgres_url"))
    )
    storage = optuna.storages.RDBStorage(url)
    study = optuna.create_study(storage=storage, study_name=unique_name, direction="maximize")
    complete(study, 0.9, {1: 0.9})
    paused = [paused_trial(study, spec, x, {1: v}) for x, v in ((0.5, 0.8), (0.1, 0.2), (0.2, 0.3))]
    context = multiprocessing.get_context("spawn")
    n_workers = 4
    barrier, out = context.Barrier(n_workers), context.Queue()
    racers = [
        context.Process(
            target=_continue_racer, args=(url, unique_name, str(spec.path), barrier, out)
        )
        for _ in range(n_workers)
    ]
    for racer in racers:
        racer.start()
    got = [out.get(timeout=EVENT_TIMEOUT_S * 2) for _ in racers]
    for racer in racers:
        racer.join(EVENT_TIMEOUT_S)
        assert racer.exitcode == 0
    # One worker continued trial 1 (promotable); the others found it continued already.
    assert sorted(got, key=lambda n: n is None) == [paused[0], None, None, None]
    (copy,) = waiting(study)
    assert retries.retry_history(copy) == [paused[0]]


def test_status_shows_the_paused_trials_and_their_disk_use(
    setup: tuple[optuna.Study, StudySpec],
) -> None:
    from dvt_hpo.views.status import format_status, read_status

    study, spec = setup
    complete(study, 0.9, {1: 0.9})
    paused_trial(study, spec, 0.5, {1: 0.8})
    status = read_status(study._storage, study._study_id, spec)
    assert [(p.number, p.step) for p in status.paused] == [(1, 1)]
    text = format_status(status)
    assert "paused (1, states " in text and "trial    1  after epoch 1  state " in text
