"""``dvt-hpo best`` on real studies (SQLite, ``dvt-hpo run`` of the trade-off toy): the
feasible Pareto front, ``--trial N`` and its export, never an infeasible "best"; and what a
resume of a study with several objectives or constraints refuses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
import yaml

from dvt_hpo.cli import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK, main
from dvt_hpo.sampling.constraints import CONSTRAINTS_KEY
from dvt_hpo.store.compat import CONSTRAINTS_ATTR, OBJECTIVES_ATTR
from dvt_hpo.studyfile import load_spec
from tests.tradeoff_study import TWO_OBJECTIVES, run_tradeoff, tradeoff_doc

pytestmark = pytest.mark.processes

Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    def call(*argv: str | Path) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([str(a) for a in argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


@pytest.fixture(scope="module")
def two_objectives(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The 2-objective, constrained study, run once for the module's tests."""
    return run_tradeoff(tmp_path_factory.mktemp("mo"), tradeoff_doc("mo"))


def stored(path: Path) -> optuna.Study:
    spec = load_spec(path)
    return optuna.load_study(study_name=spec.study.name, storage=spec.study.storage)


def by_x(study: optuna.Study) -> dict[float, optuna.trial.FrozenTrial]:
    return {t.params["x"]: t for t in study.trials}


def test_a_two_objective_study_completes_with_values_and_constraints_stored(
    two_objectives: tuple[Path, str],
) -> None:
    path, out = two_objectives
    study = stored(path)
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    assert study.metric_names == ["score", "cost"]
    trials = by_x(study)
    assert all(t.state.name == "COMPLETE" for t in trials.values())
    # Both values from the epoch best on score (the last): cost 10x + 2, not its lowest 10x.
    assert trials[0.4].values == pytest.approx([0.4, 6.0])
    assert {x: tuple(t.system_attrs[CONSTRAINTS_KEY]) for x, t in trials.items()} == {
        0.2: (-300.0,),
        0.4: (-100.0,),
        0.6: pytest.approx((100.0,)),
        0.8: (300.0,),
    }
    # Nothing reported to Optuna (it cannot prune several objectives); every epoch stored.
    assert all(
        not t.intermediate_values and t.user_attrs["history"]["cost"] for t in trials.values()
    )
    attrs = study._storage.get_study_system_attrs(study._study_id)
    assert attrs[OBJECTIVES_ATTR] == TWO_OBJECTIVES["metrics"]
    assert attrs[CONSTRAINTS_ATTR] == [{"metric": "size", "min": None, "max": 500.0}]
    # The start line and the summary show every objective; infeasible trials are marked.
    assert "maximize score, minimize cost (the epoch best on score), subject to size <= 500" in out
    assert "COMPLETE score=0.8000 cost=10.0000 infeasible" in out
    summary = out[out.index("trials: 4 complete") :]
    assert "Pareto front (2 trial(s), feasible only):" in summary
    assert f"trial {trials[0.4].number}: score=0.4000 cost=6.0000  x=0.4" in summary
    assert "x=0.8" not in summary


def test_best_prints_the_feasible_front(two_objectives: tuple[Path, str], cli: Cli) -> None:
    path, _ = two_objectives
    trials = by_x(stored(path))
    code, out, _ = cli("best", path)
    assert code == EXIT_OK
    lines = out.splitlines()
    assert lines[0] == "Pareto front of study 'mo': 2 trial(s), feasible only"
    assert lines[1].split() == ["trial", "score", "cost", "params"]
    rows = sorted(lines[2:], key=lambda line: int(line.split()[0]))
    expected = sorted(
        [f"{trials[0.2].number} 0.2 4 x=0.2", f"{trials[0.4].number} 0.4 6 x=0.4"],
        key=lambda line: int(line.split()[0]),
    )
    assert [" ".join(r.split()) for r in rows] == expected


def test_export_needs_a_trial_with_several_objectives(
    two_objectives: tuple[Path, str], cli: Cli, tmp_path: Path
) -> None:
    path, _ = two_objectives
    trials = by_x(stored(path))
    front = sorted([trials[0.2].number, trials[0.4].number])
    code, _, err = cli("best", path, "--export", tmp_path / "best.yaml")
    assert code == EXIT_BAD_INPUT
    assert err.strip() == (
        "error: --export: study 'mo' has 2 objectives, so no single best trial: choose one with "
        f"--trial N (the Pareto front: trials {front[0]}, {front[1]})"
    )
    assert not (tmp_path / "best.yaml").exists()


def test_export_of_a_chosen_trial(
    two_objectives: tuple[Path, str], cli: Cli, tmp_path: Path
) -> None:
    path, _ = two_objectives
    trials = by_x(stored(path))
    on_front, infeasible = trials[0.4].number, trials[0.8].number

    code, out, _ = cli("best", path, "--trial", on_front, "--export", tmp_path / "a.yaml")
    assert code == EXIT_OK and "note" not in out
    assert out.startswith(f"trial {on_front}: score=0.4 cost=6\n  x: 0.4\n")
    assert yaml.safe_load((tmp_path / "a.yaml").read_text())["config"] == {"x": 0.4, "epochs": 3}

    code, out, _ = cli("best", path, "--trial", infeasible, "--export", tmp_path / "b.yaml")
    assert code == EXIT_OK
    assert f"note: trial {infeasible} does not meet objective.constraints" in out
    assert yaml.safe_load((tmp_path / "b.yaml").read_text())["config"]["x"] == 0.8


@pytest.mark.parametrize(
    ("trial", "message"),
    [("99", "has no trial 99; its trials are numbered 0 to 3")],
)
def test_a_trial_that_does_not_exist_is_refused(
    two_objectives: tuple[Path, str], cli: Cli, tmp_path: Path, trial: str, message: str
) -> None:
    path, _ = two_objectives
    code, _, err = cli("best", path, "--trial", trial, "--export", tmp_path / "c.yaml")
    assert code == EXIT_BAD_INPUT and message in err
    assert not (tmp_path / "c.yaml").exists()


def test_a_trial_that_is_not_complete_is_refused(tmp_path: Path, cli: Cli) -> None:
    doc = tradeoff_doc("pending", choices=[0.2, 0.4])
    path, _ = run_tradeoff(tmp_path, doc)
    study = stored(path)
    study.enqueue_trial({"x": 0.2})  # WAITING: trial 2
    code, _, err = cli("best", path, "--trial", "2")
    assert code == EXIT_BAD_INPUT
    assert "trial 2 of study 'pending' is WAITING, not COMPLETE" in err


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (["objective.metrics[1].direction=maximize"], "objective.metrics"),
        (["objective.metrics=[{name: score, direction: maximize}]"], "objective.metrics"),
        (["objective.metrics[1].name=size"], "objective.metrics"),
        (["objective.constraints[0].max=400"], "objective.constraints"),
        (["objective.constraints=null"], "objective.constraints"),
    ],
)
@pytest.mark.parametrize("command", ["run", "validate"])
def test_a_resume_with_changed_objectives_or_constraints_is_refused(
    two_objectives: tuple[Path, str], cli: Cli, command: str, change: list[str], field: str
) -> None:
    path, _ = two_objectives
    before = [(t.number, t.state.name) for t in stored(path).trials]
    code, out, err = cli(command, path, *(a for c in change for a in ("--set", c)))
    assert code == EXIT_BAD_INPUT, out + err
    assert f"{field}: differs from the study 'mo' stored in" in err
    assert "the objective of a study cannot change" in err
    assert [(t.number, t.state.name) for t in stored(path).trials] == before


def test_pruning_is_refused_for_several_objectives(
    two_objectives: tuple[Path, str], cli: Cli
) -> None:
    path, _ = two_objectives
    code, _, err = cli("validate", path, "--set", "study.pruner=median")
    assert code == EXIT_BAD_INPUT and "cannot be pruned" in err
    code, out, _ = cli("validate", path)
    assert code == EXIT_OK and "same objective and search space" in out


SINGLE = {
    "metric": "score",
    "direction": "maximize",
    "constraints": [{"metric": "size", "max": 500}],
}


def test_an_infeasible_trial_is_never_the_best(tmp_path: Path, cli: Cli) -> None:
    path, out = run_tradeoff(tmp_path, tradeoff_doc("one", SINGLE))
    trials = by_x(stored(path))
    best = trials[0.4].number  # 0.6 and 0.8 score higher but break size <= 500
    assert f"best trial {best}: score=0.4000" in out
    code, shown, _ = cli("best", path, "--export", tmp_path / "best.yaml")
    assert code == EXIT_OK and shown.startswith(f"best trial {best}: score=0.4\n")
    assert yaml.safe_load((tmp_path / "best.yaml").read_text())["config"]["x"] == 0.4
    code, shown, _ = cli("best", path, "--trial", trials[0.2].number)
    assert code == EXIT_OK and f"is not the best trial (best: {best})" in shown


def test_no_feasible_trial_is_one_line_naming_the_closest(tmp_path: Path, cli: Cli) -> None:
    doc = tradeoff_doc("none", SINGLE, choices=[0.6, 0.8])
    path, out = run_tradeoff(tmp_path, doc)
    closest = by_x(stored(path))[0.6].number
    message = (
        "study 'none' has 2 complete trial(s) and none meets objective.constraints; the closest "
        f"is trial {closest} (size over by 100)"
    )
    assert message in out and "best trial" not in out
    code, shown, err = cli("best", path, "--export", tmp_path / "best.yaml")
    assert (code, shown, err) == (EXIT_FAILURE, "", f"error: {message}\n")
    assert not (tmp_path / "best.yaml").exists()


def test_a_constraint_metric_never_reported_fails_the_trial(tmp_path: Path) -> None:
    doc = tradeoff_doc("unreported", choices=[0.2])
    doc["trainer"]["config"]["omit"] = ["size"]
    path, _ = run_tradeoff(tmp_path, doc, EXIT_FAILURE)  # no trial of the run succeeded
    [trial] = stored(path).trials
    assert trial.state.name == "FAIL"
    assert trial.user_attrs["reason"] == (
        "constraint metric 'size' was never reported as a finite number; the trial reported "
        "['cost', 'score']"
    )


def test_the_multi_objective_example_runs_shortened(tmp_path: Path, cli: Cli) -> None:
    """studies/multi-objective.yaml (10 trials, under a minute on 2 cores) as 4 one-epoch
    trials of the real trainer: latency and n_params reported, the front printed, a trial
    exported."""
    example = Path(__file__).resolve().parents[2] / "studies" / "multi-objective.yaml"
    path = tmp_path / "multi-objective.yaml"
    path.write_text(example.read_text())
    sets = ["--set", "study.n_trials=4", "--set", "trainer.config.epochs=1"]
    code, out, err = cli("run", path, *sets)
    assert code == EXIT_OK, out + err
    study = stored(path)
    assert study.metric_names == ["macro_f1", "latency_ms"]
    for trial in study.trials:
        assert trial.state.name == "COMPLETE"
        assert trial.values[1] > 0  # latency_ms, from the trainer
        n_params = trial.user_attrs["n_params"]
        over = trial.system_attrs[CONSTRAINTS_KEY][0]
        assert over == pytest.approx(n_params - 60000)
    code, out, _ = cli("best", path)
    assert code == EXIT_OK
    assert "Pareto front" in out
    front = [int(line.split()[0]) for line in out.splitlines()[2:]]
    assert front and all(study.trials[n].system_attrs[CONSTRAINTS_KEY][0] <= 0 for n in front)
    code, _, err = cli("best", path, "--trial", front[0], "--export", tmp_path / "best.yaml")
    assert code == EXIT_OK, err
    exported = yaml.safe_load((tmp_path / "best.yaml").read_text())
    width = study.trials[front[0]].params["width"]
    assert exported["model"]["kwargs"]["width"] == width
