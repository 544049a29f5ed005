"""The lines a run prints about itself: objective, dashboard command, waiting, retry hint."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import FloatDistribution

from dvt_hpo.results.events import TrialFinished
from dvt_hpo.results.front import select_best
from dvt_hpo.sampling.constraints import CONSTRAINTS_KEY
from dvt_hpo.spec.model import ConstraintSpec, MetricSpec, ObjectiveSpec
from dvt_hpo.study.messages import (
    dashboard_hint,
    follow_up,
    objective_text,
    retry_hint,
    summary_lines,
    trial_line,
    waiting_line,
)


def test_the_objective_shows_its_direction() -> None:
    text = objective_text(ObjectiveSpec(metric="val_mse", direction="minimize", reduce="best"))
    assert "minimize" in text and "val_mse" in text


def test_the_dashboard_hint_is_dvt_hpo_dashboard_on_the_same_study() -> None:
    # optuna-dashboard is not on PATH in a venv that was not activated; dvt-hpo is.
    hint = dashboard_hint(Path("/srv/my studies/study.yaml"), installed=True)
    assert shlex.split(hint.removeprefix("watch it: ")) == [
        "dvt-hpo", "dashboard", "/srv/my studies/study.yaml"
    ]  # fmt: skip


def test_follow_ups_carry_the_overrides_of_the_run() -> None:
    overrides = ("study.name=x", "study.n_trials=6", "trainer.config.note=two words")
    hint = dashboard_hint(Path("/srv/study.yaml"), overrides, installed=True)
    assert shlex.split(hint.removeprefix("watch it: ")) == [
        "dvt-hpo", "dashboard", "/srv/study.yaml", "--set", "study.name=x",
        "--set", "study.n_trials=6", "--set", "trainer.config.note=two words",
    ]  # fmt: skip
    retry = retry_hint([1], Path("/srv/study.yaml"), overrides).split(": ", 1)[1]
    assert shlex.split(retry)[-3:] == ["--set", "trainer.config.note=two words", "--retry-failed"]


def test_a_relative_study_file_is_named_as_typed(monkeypatch: Any, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert follow_up("status", tmp_path / "sub" / "study.yaml") == "dvt-hpo status sub/study.yaml"


def test_a_password_in_an_override_is_never_shown_and_the_command_still_works() -> None:
    url = "postgresql://ann:s3cret@db.example:5432/hpo"
    hint = dashboard_hint(Path("/srv/study.yaml"), (f"study.storage={url}",), installed=True)
    assert "s3cret" not in hint and "***" not in hint
    command = hint.removeprefix("watch it: ").split("  (")[0]
    assert shlex.split(command)[-1] == "study.storage=postgresql://ann@db.example:5432/hpo"
    assert "PGPASSWORD" in hint and "password is not shown" in hint


def test_without_optuna_dashboard_the_hint_says_how_to_install_it() -> None:
    hint = dashboard_hint(Path("/srv/study.yaml"), installed=False)
    assert "dvt-hpo dashboard" not in hint
    assert "pip install 'dvt-hpo[dashboard]'" in hint


def test_the_waiting_line_names_trials_heartbeat_ages_and_the_longest_wait() -> None:
    line = waiting_line([3, 4], {3: 5.2, 4: 12.0}, grace_period_s=20, heartbeat_interval_s=10)
    assert "waiting for 2 RUNNING trial(s)" in line
    assert (
        "trial 3 (last heartbeat 5 s ago)" in line and "trial 4 (last heartbeat 12 s ago)" in line
    )
    # Trial 3 turns stale in 14.8 s, and the check runs every heartbeat interval.
    assert "at most about 25 s" in line and "study.grace_period_s=20" in line


def test_a_trial_of_unknown_age_may_take_a_whole_grace_period() -> None:
    line = waiting_line([7], {}, grace_period_s=20, heartbeat_interval_s=10)
    assert "trial 7." in line and "at most about 30 s" in line


def test_the_retry_hint_is_a_command_to_paste() -> None:
    hint = retry_hint([0, 2], Path("/srv/my studies/study.yaml"))
    command = hint.split(": ", 1)[1]
    assert shlex.split(command) == [
        "dvt-hpo", "run", "/srv/my studies/study.yaml", "--retry-failed"
    ]  # fmt: skip
    assert hint.startswith("2 failed trial(s)")


def test_the_objective_line_of_several_objectives_and_constraints() -> None:
    objective = ObjectiveSpec(
        metric="macro_f1",
        direction="maximize",
        metrics=(MetricSpec("macro_f1", "maximize"), MetricSpec("latency_ms", "minimize")),
        constraints=(ConstraintSpec("n_params", max=20000.0),),
    )
    assert objective_text(objective) == (
        "maximize macro_f1, minimize latency_ms (the epoch best on macro_f1), subject to "
        "n_params <= 20000"
    )


def test_a_trial_line_shows_every_objective_and_infeasibility() -> None:
    event = TrialFinished(
        3, 4, "COMPLETE", 0.9, {"x": 0.5}, None, 2.0, {}, values=(0.9, 12.5), feasible=False
    )
    assert trial_line(event, ["macro_f1", "latency_ms"]) == (
        "trial   3 COMPLETE macro_f1=0.9000 latency_ms=12.5000 infeasible    2.0s  x=0.5"
    )
    failed = TrialFinished(4, 5, "FAIL", None, {"x": 0.1}, "boom", 1.0, {})
    assert trial_line(failed, ["macro_f1", "latency_ms"]) == (
        "trial   4 FAIL                           1.0s  x=0.1 reason: boom"
    )


def _frozen(number: int, values: list[float], constraints: list[float]) -> Any:
    made = optuna.trial.create_trial(
        values=values,
        params={"x": 0.5},
        distributions={"x": FloatDistribution(0, 1)},
        system_attrs={CONSTRAINTS_KEY: constraints},
    )
    made.number = number
    return made


def test_the_summary_shows_the_front_or_says_none_is_feasible() -> None:
    trials = [
        _frozen(0, [0.9, 3.0], [-1.0]),
        _frozen(1, [0.5, 1.0], [-1.0]),
        _frozen(2, [1, 9], [2]),
    ]
    names = ["f1", "ms"]
    lines = summary_lines(
        trials, select_best(trials, ["maximize", "minimize"]), names, Path("s.yaml")
    )
    assert lines == [
        "trials: 3 complete",
        "Pareto front (2 trial(s), feasible only):",
        "  trial 0: f1=0.9000 ms=3.0000  x=0.5",
        "  trial 1: f1=0.5000 ms=1.0000  x=0.5",
    ]
    infeasible = [_frozen(0, [0.9], [3.0]), _frozen(1, [0.1], [1.0])]
    best = select_best(infeasible, ["maximize"])
    lines = summary_lines(
        infeasible, best, "f1", Path("s.yaml"), study_name="s", constraints=["mb"]
    )
    assert lines[-1] == (
        "study 's' has 2 complete trial(s) and none meets objective.constraints; the closest is "
        "trial 1 (mb over by 1)"
    )


def _study_section(write_study: Any, **study: Any) -> Any:
    from dvt_hpo.studyfile import load_spec
    from tests.conftest import toy_study

    doc = toy_study("algorithms")
    for key in ("sampler", "pruner"):
        doc["study"].pop(key)
    if "objective_constraints" in study:
        doc["objective"]["constraints"] = study.pop("objective_constraints")
    doc["study"].update(study)
    return load_spec(write_study(doc))


def test_a_study_that_names_no_sampler_or_pruner_is_told_the_defaults(write_study: Any) -> None:
    from dvt_hpo.study.messages import algorithms_text

    spec = _study_section(write_study)
    assert algorithms_text(spec.study) == (
        "sampler multi-fidelity GP · pruner Wilcoxon (p 0.1) — the defaults"
    )
    # A seed keeps the defaults the defaults.
    spec = _study_section(write_study, sampler={"seed": 3})
    assert algorithms_text(spec.study) == (
        "sampler multi-fidelity GP (seed 3) · pruner Wilcoxon (p 0.1) — the defaults"
    )


def test_a_constrained_study_is_told_its_own_defaults(write_study: Any) -> None:
    from dvt_hpo.study.messages import algorithms_text, spec_algorithms_text

    constraints = (ConstraintSpec(metric="n_params", max=5.0e6),)
    spec = _study_section(write_study, objective_constraints=[{"metric": "n_params", "max": 5e6}])
    assert spec.objective.constraints == constraints
    pruner = "pruner Wilcoxon + successive halving (p 0.1, min resource 3, reduction factor 3)"
    assert spec_algorithms_text(spec) == (
        f"sampler TPE (univariate, consider endpoints) · {pruner} — the defaults"
    )
    # A section of neither default is not.
    several = algorithms_text(spec.study, multi_objective=True)
    assert not several.endswith(" — the defaults")


def test_the_rung_limit_taken_from_the_epochs_leaves_the_default_pruner_the_default() -> None:
    from dvt_hpo.sampling.kinds import default_algorithms
    from dvt_hpo.spec.model import PrunerSpec, StudySection
    from dvt_hpo.study.messages import algorithms_text

    CONSTRAINED_SAMPLER = default_algorithms(constrained=True)[0]  # noqa: N806

    derived = PrunerSpec("wilcoxon_halving", {"max_resource": 51})
    study = StudySection(name="x", sampler=CONSTRAINED_SAMPLER, pruner=derived)
    assert algorithms_text(study, constrained=True).endswith("max resource 51) — the defaults")
    written = PrunerSpec("wilcoxon_halving", {"max_resource": 51, "reduction_factor": 4})
    study = StudySection(name="x", sampler=CONSTRAINED_SAMPLER, pruner=written)
    assert algorithms_text(study, constrained=True).endswith(
        "max resource 51) — the default sampler"
    )


def test_named_algorithms_show_the_settings_written() -> None:
    from dvt_hpo.spec.model import PrunerSpec, SamplerSpec, StudySection
    from dvt_hpo.study.messages import algorithms_text

    study = StudySection(
        name="x",
        sampler=SamplerSpec("tpe", {"seed": 0, "n_startup_trials": 4, "constant_liar": True}),
        pruner=PrunerSpec("median", {"n_warmup_steps": 1}),
    )
    assert algorithms_text(study) == (
        "sampler TPE (univariate, seed 0, startup trials 4, constant liar) · "
        "pruner median (warm-up steps 1)"
    )
    study = StudySection(name="x", sampler=SamplerSpec("random", {}), pruner=PrunerSpec("none"))
    assert algorithms_text(study) == "sampler random · pruner none"
    study = StudySection(
        name="x", sampler=SamplerSpec("nsga2", {"seed": 1}), pruner=PrunerSpec("none")
    )
    assert algorithms_text(study, multi_objective=True) == (
        "sampler NSGA-II (seed 1) · pruner none — the defaults"
    )
    study = StudySection(
        name="x",
        sampler=SamplerSpec("tpe", {"multivariate": False, "consider_endpoints": True}),
        pruner=PrunerSpec("hyperband", {"max_resource": 52}),
    )
    assert algorithms_text(study, constrained=True) == (
        "sampler TPE (univariate, consider endpoints) · pruner Hyperband (max resource 52) — "
        "the default sampler"
    )
    study = StudySection(name="x", sampler=SamplerSpec("mf_gp", {}), pruner=PrunerSpec("none"))
    assert algorithms_text(study) == "sampler multi-fidelity GP · pruner none — the default sampler"


def test_a_trial_the_users_stop_interrupted_reads_stopped_not_fail() -> None:
    """FAIL in Optuna (the next run retries it), but not broken: the line says STOPPED."""
    reason = "interrupted (the study was stopped)"
    stopped = TrialFinished(5, 6, "FAIL", None, {"x": 0.1}, reason, 1.0, {"status": "interrupted"})
    assert trial_line(stopped, "macro_f1") == (
        f"trial   5 STOPPED                        1.0s  x=0.1 reason: {reason}"
    )
