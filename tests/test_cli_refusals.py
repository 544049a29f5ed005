"""``run`` refuses before it writes anything, for every refusal ``validate`` gives: the mistakes
a new user makes are bad input (exit 2, one line naming the file, line and field), and leave no
file, no study and no attribute behind; ``validate`` gives the same refusal."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest

from dvt_hpo.budget.compute import STARTED_ATTR
from dvt_hpo.cli import EXIT_BAD_INPUT, EXIT_OK, main
from tests.conftest import toy_study


def listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT, err
    assert err.startswith("error: study.yaml:") and err.count("\n") == 1, err
    return err


TRAINER = "def run(config, ctx):\n    return {'loss': 1.0}\n"
PATTERN = r"epoch (?P<step>\d+) mse=(?P<val_mse>[0-9.]+)"
# Each: the study file's text, the line and field the refusal names, and what it says.
NEWCOMER_MISTAKES = {
    "path-typo": (
        "trainer: {entrypoint: mytrain:run, config: {hidden: 32}}\n"
        "search_space:\n  - {name: hidden, path: hiden, kind: categorical, choices: [16, 32]}\n",
        "8: search_space[0].path",
        "did you mean 'hidden'?",
    ),
    "builtin-model-keyword": (
        "trainer:\n  config: {model: {builder: cnn, kwargs: {widht: 16}}}\n"
        "search_space:\n  - {name: lr, path: optim.optim_args.lr, kind: float, low: 0.001, "
        "high: 0.1}\n",
        "7: trainer.config.model.kwargs.widht",
        "did you mean 'width'?",
    ),
    "builtin-optimizer-keyword": (
        "trainer:\n  config: {optim: {target: torch.optim.SGD, optim_args: {lrr: 0.1}}}\n"
        "search_space:\n  - {name: w, path: model.kwargs.width, kind: categorical, "
        "choices: [8, 16]}\n",
        "7: trainer.config.optim.optim_args.lrr",
        "did you mean 'lr'?",
    ),
    "builtin-optimizer-choice": (
        "trainer:\n  config: {epochs: 1}\n"
        "search_space:\n  - {name: o, path: optim.target, kind: categorical, "
        "choices: [torch.optim.SGD, torch.optim.AdamWW]}\n",
        "9: search_space[0].choices[1]",
        "did you mean 'torch.optim.AdamW'?",
    ),
    "command-metric-not-in-pattern": (
        f"trainer:\n  command: ['{{python}}', train.py, --lr, '{{lr}}']\n"
        f"  metrics_pattern: '{PATTERN}'\n"
        "search_space:\n  - {name: lr, kind: float, low: 0.001, high: 0.1}\n",
        "4: objective.metric",
        "(it reports: val_mse)",
    ),
    "warm-start-of-no-study": (
        "trainer: {entrypoint: mytrain:run, config: {hidden: 32}}\n"
        "search_space:\n  - {name: hidden, path: hidden, kind: categorical, choices: [16, 32]}\n",
        "5: study.warm_start.study",
        "cannot read the earlier study 'no-such-study'",
    ),
}


def study_text(body: str, *, warm_start: bool = False, metric: str = "loss") -> str:
    warm = "  warm_start: {study: no-such-study}\n" if warm_start else ""
    return (
        f"study:\n  name: newcomer\n  budget: {{hours: 0.003}}\n{warm}"
        f"objective: {{metric: {metric}}}\ntrials: {{devices: cpu}}\n{body}"
    )


@pytest.mark.parametrize("mistake", sorted(NEWCOMER_MISTAKES))
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_newcomer_mistake_is_refused_before_anything_is_written(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    mistake: str,
    command: str,
) -> None:
    body, where, says = NEWCOMER_MISTAKES[mistake]
    (tmp_path / "mytrain.py").write_text(TRAINER)
    (tmp_path / "train.py").write_text("print('epoch 0 mse=1.0')\n")
    text = study_text(body, warm_start=mistake.startswith("warm"), metric="loss")
    if mistake.startswith("warm"):
        where = "4: study.warm_start.study"
    (tmp_path / "study.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    before = listing(tmp_path)
    err = refused([command, "study.yaml"], capsys)
    assert f"study.yaml:{where}: " in err and says in err, err
    assert listing(tmp_path) == before


def test_run_with_workers_refuses_a_warm_start_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run --workers 2``: the refusal once, before any worker starts (not one line per
    worker), and nothing written."""
    body, _, _ = NEWCOMER_MISTAKES["warm-start-of-no-study"]
    (tmp_path / "mytrain.py").write_text(TRAINER)
    (tmp_path / "study.yaml").write_text(study_text(body, warm_start=True))
    monkeypatch.chdir(tmp_path)
    before = listing(tmp_path)
    err = refused(["run", "study.yaml", "--workers", "2"], capsys)
    assert "study.yaml:4: study.warm_start.study: cannot read the earlier study" in err, err
    assert "[w" not in err
    assert listing(tmp_path) == before


def _earlier_study(storage: str, *, metric: str) -> None:
    """A finished study 'old' in ``storage``, recorded with another objective."""
    study = optuna.create_study(storage=storage, study_name="old")
    study.set_user_attr("dvt_hpo:objective", {"metric": metric})
    study.add_trial(
        optuna.trial.create_trial(
            params={"x": 0.5},
            distributions={"x": optuna.distributions.FloatDistribution(0.0, 1.0)},
            value=0.1,
        )
    )


def test_copy_results_of_another_objective_creates_no_study(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    write_study: Callable[..., Path],
) -> None:
    """The earlier study's objective is read before this one is created: no study, no attr."""
    warm = {"study": "old", "copy_results": True}
    doc = toy_study("new", study={"warm_start": warm, "budget": {"hours": 0.003}})
    write_study(doc)
    monkeypatch.chdir(tmp_path)
    storage = f"sqlite:///{tmp_path / 'new.db'}"
    _earlier_study(storage, metric="accuracy")
    for command in ("validate", "run"):
        err = refused([command, "study.yaml"], capsys)
        assert "study.warm_start.copy_results: the earlier study 'old' has another objective" in err
    names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
    assert names == ["old"]


@pytest.mark.processes
def test_a_refused_rerun_leaves_the_study_as_it_was(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    write_study: Callable[..., Path],
) -> None:
    """A study that ran, rerun with a warm start of no study: refused, its attrs (its start
    among them, which study.budget.hours counts from) and trials untouched."""
    doc: dict[str, Any] = toy_study("again", study={"n_trials": 1, "budget": {"hours": 1}})
    write_study(doc)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "study.yaml"]) == EXIT_OK
    storage = f"sqlite:///{tmp_path / 'again.db'}"

    def state() -> tuple[Any, ...]:
        study = optuna.load_study(study_name="again", storage=storage)
        system = study._storage.get_study_system_attrs(study._study_id)
        return (study.user_attrs, system, [t.state for t in study.trials])

    before = state()
    assert STARTED_ATTR in before[1]
    doc["study"]["warm_start"] = {"study": "no-such-study"}
    write_study(doc)
    err = refused(["run", "study.yaml"], capsys)
    assert "study.warm_start.study: cannot read the earlier study 'no-such-study'" in err
    assert state() == before
