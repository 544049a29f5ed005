"""YAML with line numbers and ``--set`` overrides (dvt_hpo.config.source)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from dvt_hpo.exceptions import SpecError
from dvt_hpo.studyfile import (
    SamplerSpec,
    load_spec,
)
from tests.studyfile.helpers import (
    BASE,
    SET,
    bad_file_test,
    case,
    study_with,
)


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


# fmt: off
BAD_SOURCE = [
    case("yaml-syntax", "study:\n  name: [s\ntrainer: {}\n", 3, None, "invalid YAML"),
    case("duplicate-key", study_with("  name: t"), 3, "study.name",
         "duplicate key 'name' (first given at line 2)"),
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


test_bad_yaml_and_overrides = bad_file_test(BAD_SOURCE)
