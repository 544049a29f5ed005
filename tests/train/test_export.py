"""``best --export`` of a trainer entry point other than the built-in one, and ``dvt-hpo train``
of it: the entry point is named beside the config, imported from the study folder and called
there once."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dvt_hpo.cli import EXIT_BAD_INPUT, EXIT_OK, main
from dvt_hpo.train.export import entrypoint_export, read_entrypoint_export

TRAINER = """\
import os


def run(config, ctx):
    for epoch in range(config["epochs"]):
        ctx.report(epoch, {"score": config["x"] * (epoch + 1)})
    with open("trained.txt", "w") as f:  # in the study folder, where trials run
        f.write(os.getcwd())
    return {"score": config["x"] * config["epochs"]}
"""


def test_train_runs_an_entry_point_export_in_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    study_dir = tmp_path / "study"
    study_dir.mkdir()
    (study_dir / "mytrainerexport.py").write_text(TRAINER)
    export = entrypoint_export("s", 3, "mytrainerexport:run", study_dir, {"epochs": 2, "x": 0.25})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "best.yaml").write_text(yaml.safe_dump(export, sort_keys=False))
    monkeypatch.chdir(elsewhere)
    read = read_entrypoint_export(elsewhere / "best.yaml")
    assert read is not None and read.cwd == str(study_dir) and read.trial == 3

    assert main(["train", "best.yaml"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "training trial 3 with mytrainerexport:run" in out and "done: score=0.5" in out
    assert (study_dir / "trained.txt").read_text() == str(study_dir)
    assert main(["train", "best.yaml", "--set", "epochs=3"]) == EXIT_BAD_INPUT


def test_a_trainer_config_is_not_an_entry_point_export(tmp_path: Path) -> None:
    (tmp_path / "best.yaml").write_text("epochs: 2\nmodel: {builder: cnn}\n")
    assert read_entrypoint_export(tmp_path / "best.yaml") is None
