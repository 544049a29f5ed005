"""benchmarks/search/: the suite's families, its split, its results file and report, and one
conditional study through dvt-hpo run against its replay."""

from __future__ import annotations

import gzip
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "benchmarks" / "search"), str(ROOT / "benchmarks")]

import split as split_mod  # noqa: E402
import suite  # noqa: E402
import suite_report  # noqa: E402
from builtin_digits import ROUND_8_CONFIGS, SGD, BuiltinDigits, read_table  # noqa: E402
from families import FAMILIES, VARIANTS, family, halves_of  # noqa: E402


def _family(name: str):  # type: ignore[no-untyped-def]
    try:
        f = family(name)
        f.tasks  # noqa: B018 (loads the data)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return f


def test_the_committed_split_is_the_seeded_one_and_halves_are_disjoint() -> None:
    committed = split_mod.read_split()
    assert set(committed) == set(FAMILIES) | set(split_mod.HELD_OUT)
    tasks = {name: _family(name).tasks for name in FAMILIES}
    assert {n: committed[n] for n in FAMILIES} == split_mod.make_split(tasks)
    for name, halves in committed.items():
        sel, rep = set(halves["selection"]), set(halves["report"])
        assert not sel & rep
        if name in FAMILIES:
            assert sel | rep == set(tasks[name])
            assert len(sel) >= 2 and len(rep) >= 2


def test_a_held_out_family_is_all_report_and_none_of_its_tasks_is_elsewhere() -> None:
    committed = split_mod.read_split()
    seen = {t for name in FAMILIES for half in committed[name].values() for t in half}
    for name, stream in split_mod.HELD_OUT.items():
        f = family(name)  # the task list needs no table
        assert committed[name] == split_mod.held_out(f.tasks, stream)
        assert committed[name]["selection"] == []
        assert sorted(committed[name]["report"]) == sorted(f.tasks)
        assert not seen & set(f.tasks)


def test_the_held_out_tasks_read_their_own_table_and_record_into_it(tmp_path: Path) -> None:
    import record_digits
    from builtin_digits import HOLDOUT_TASKS, TASKS

    table = tmp_path / "holdout.jsonl.gz"
    assert record_digits.main(["--holdout", "--configs", "1", "--table", str(table)]) == 0
    with gzip.open(table, "rt") as fh:
        rows = [json.loads(line) for line in fh]
    assert [r["task"] for r in rows] == list(HOLDOUT_TASKS)
    assert not set(HOLDOUT_TASKS) & set(TASKS)
    f = BuiltinDigits(table, holdout=True)
    assert f.name == "builtin_digits_holdout" and f.tasks == tuple(HOLDOUT_TASKS)
    for r in rows:
        assert len(r["curve"]) == f.steps
        assert f.curve(r["task"], r["params"]).tolist() == r["curve"]


@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_family_answers_a_finite_curve_of_its_steps(name: str) -> None:
    f = _family(name)
    task = f.tasks[0]
    curve = f.curve(task, f.trainer_defaults())
    assert curve.shape == (f.steps,)
    assert np.isfinite(curve).all()
    top, median = f.reference(task)
    assert top >= median


@pytest.mark.parametrize("name", list(VARIANTS))
def test_a_variant_answers_its_steps_on_its_familys_tasks_and_halves(name: str) -> None:
    f, base = _family(name), _family(halves_of(name))
    assert f.name == name and f.tasks == base.tasks
    task, params = f.tasks[0], f.trainer_defaults()
    curve = f.curve(task, params)
    assert curve.shape == (f.steps,) and np.isfinite(curve).all()
    if f.steps < base.steps:  # a cut: the family's curve, up to the cut
        np.testing.assert_allclose(curve, base.curve(task, params)[: f.steps], rtol=1e-6)
    top, median = f.reference(task)
    assert top >= median


def test_builtin_digits_reads_the_configs_rounds_7_and_8_read() -> None:
    # Their kept grids replay and normalise against the table as it was then.
    table = _family("builtin_digits").table
    assert {task: len(rows) for task, rows in table.items()} == ROUND_8_CONFIGS
    larger = _family("builtin_digits_1000").table
    for task, rows in table.items():
        assert larger[task][: len(rows)] == rows


@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_family_study_file_loads_with_dvt_hpos_loader(name: str, tmp_path: Path) -> None:
    f = _family(name)
    doc = suite.study_document(name, f.tasks[0], "default", 0, 10 * f.steps, tmp_path)
    got = suite.resolved(doc)
    assert got["sampler"]["kind"] and got["pruner"]["kind"]
    assert got["sampler"]["seed"] == 0


def test_trainsize_surrogates_learn_with_more_data() -> None:
    f = _family("rbv2_rpart")
    params = {"cp": 0.001, "maxdepth": 20, "minbucket": 5, "minsplit": 10}
    params["num_impute_selected_cpo"] = "impute.mean"
    curve = f.curve(f.tasks[0], params)
    assert curve[-1] > curve[0]
    # A tree pruned to its root (cp = 1) is worse than a grown one.
    assert f.curve(f.tasks[0], {**params, "cp": 1.0})[-1] < curve[-1]


def test_the_built_in_trainer_table_answers_a_recorded_config_with_its_curve() -> None:
    f = BuiltinDigits()
    table = read_table()
    task = next((t for t, rows in table.items() if rows), None)
    if task is None:
        pytest.skip("no recorded curve: run benchmarks/search/record_digits.py")
    for params, curve in table[task][:5]:
        assert f.curve(task, params).tolist() == curve


def test_momentum_counts_only_under_sgd() -> None:
    f = BuiltinDigits()
    table = read_table()
    rows = [(t, p) for t, rs in table.items() for p, _ in rs if p["optimizer"] != SGD]
    if not rows:
        pytest.skip("no recorded AdamW curve")
    task, params = rows[0]
    a = f.curve(task, {**params, "momentum": 0.0})
    b = f.curve(task, {**params, "momentum": 0.95})
    assert a.tolist() == b.tolist()


def test_the_search_space_of_the_built_in_trainer_is_conditional() -> None:
    space = BuiltinDigits().search_space()
    assert any("when" in d for d in space)


def test_the_learner_choice_answers_each_branch_with_its_own_surrogate() -> None:
    f = _family("cash_rpart_glmnet")
    space = {d["name"]: d for d in f.search_space()}
    assert space["learner"]["choices"] == ["rpart", "glmnet"]
    task = f.tasks[0]
    for learner in ("rpart", "glmnet"):
        own = _family({"rpart": "rbv2_rpart", "glmnet": "iaml_glmnet"}[learner])
        names = [d["name"] for d in own.search_space()]
        assert all(space[n]["when"] == {"learner": learner} for n in names)
        params = {**f.trainer_defaults(), "learner": learner}
        np.testing.assert_array_equal(
            f.curve(task, params), own.curve(task, {n: params[n] for n in names})
        )


def _row(cell: str, trials: list[list], task: str = "t", seed: int = 0) -> dict:
    return {
        "family": "iaml_glmnet",
        "task": task,
        "half": "report",
        "cell": cell,
        "seed": seed,
        "budget": 100,
        "fidelity": "x",
        "trials": trials,
    }


def test_the_report_reads_regret_from_completed_trials_only() -> None:
    curve = suite_report.incumbent_curve(
        [[0, "COMPLETE", 10, 0.5], [1, "PRUNED", 2, None], [2, "COMPLETE", 10, 0.9]]
    )
    assert suite_report.best_within(curve, 11) == 0.5
    assert suite_report.best_within(curve, 22) == 0.9
    assert suite_report.regret(None, (1.0, 0.5)) == math.inf
    assert suite_report.regret(0.75, (1.0, 0.5)) == pytest.approx(0.5)


def test_goals_compare_the_default_with_both_baselines() -> None:
    base = {"r0.25": 0.5, "r0.5": 0.3, "r1.0": 0.1, "share": 1.0}
    cells = {"tpe+none": base, "tpe+median": dict(base)}
    assert (
        suite_report.goals("rbv2_rpart", {**cells, "default": {**base, "share": 0.4, "r0.5": 0.2}})
        == []
    )
    missed = suite_report.goals(
        "lcbench", {**cells, "default": {**base, "share": 0.4, "r0.5": 0.2}}
    )
    assert missed and "35%" in missed[0]
    missed = suite_report.goals(
        "rbv2_rpart", {**cells, "default": {**base, "share": 0.4, "r1.0": 0.2}}
    )
    assert any("@100%" in m for m in missed) and any("@50%" in m for m in missed)


def test_by_task_gives_each_tasks_mean_over_its_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(suite_report, "reference", lambda fam, task, runs: (1.0, 0.0))
    done = [0, "COMPLETE", 100]  # a full training: the whole budget at once
    rows = [
        _row("a", [[*done, 0.8]], task="t1", seed=0),
        _row("a", [[*done, 0.6]], task="t1", seed=1),
        _row("a", [[*done, 0.5]], task="t2"),
        _row("b", [[*done, 0.9]], task="t2"),
    ]
    table = suite_report.by_task(rows)
    # Regret 1 - value; at 50 % of the budget no trial has completed ("-").
    assert "| t1 | - / 0.300 | not run |" in table
    assert "| t2 | - / 0.500 | - / 0.100 |" in table


def test_paired_counts_each_study_against_its_twin_on_the_same_task_and_seed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(suite_report, "reference", lambda fam, task, runs: (1.0, 0.0))

    def row(cell: str, seed: int, value: float) -> dict[str, object]:
        trials = [[0, "COMPLETE", 5, 0.1], [1, "COMPLETE", 5, value]]
        return {
            "family": "f",
            "task": "t",
            "cell": cell,
            "seed": seed,
            "budget": 10,
            "trials": trials,
        }

    rows = [row("a", 0, 0.9), row("b", 0, 0.5), row("a", 1, 0.5), row("b", 1, 0.5)]
    rows += [row("a", 2, 0.2), row("b", 2, 0.6), row("b", 3, 0.9)]  # seed 3: no twin
    table = suite_report.paired(rows, "a", "b")
    assert "| f | 50% | 0 | 3 | 0 | 1 |" in table  # the first trials are the same
    assert "| f | 100% | 1 | 1 | 1 | 1 |" in table
    assert suite_report.sign_test_p(10, 0) == pytest.approx(2 / 2**10)
    assert suite_report.sign_test_p(0, 0) == 1.0
    assert "no study of a" in suite_report.paired(rows, "a", "c")


def test_results_resume_and_a_cut_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "grid.jsonl.gz"
    with gzip.open(path, "at") as fh:
        fh.write(json.dumps(_row("tpe+none", [[0, "COMPLETE", 10, 0.5]])) + "\n")
    with gzip.open(path, "at") as fh:
        fh.write('{"family": "cut')
    rows = list(suite.read_results(path))
    assert [r["cell"] for r in rows] == ["tpe+none"]


@pytest.mark.processes
def test_a_conditional_study_through_dvt_hpo_run_is_its_replay() -> None:
    f = _family("builtin_digits")
    task = next((t for t, rows in read_table().items() if len(rows) >= 5), None)
    if task is None:
        pytest.skip("no recorded curve: run benchmarks/search/record_digits.py")
    run = suite.checked("builtin_digits", task, "tpe+median", 0, 4 * f.steps)
    assert run["engine"] == "dvt"
    assert len(run["trials"]) >= 4
