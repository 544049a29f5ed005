"""Section trainer: entry point, config (inline or file), schema."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from dvt_hpo.exceptions import SpecError
from dvt_hpo.studyfile import (
    load_spec,
)
from tests.studyfile.helpers import (
    BASE,
    bad_file_test,
    case,
    snapshot,
)


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
    # Without a schema a new last key is refused as the typo it most often is...
    with pytest.raises(SpecError) as info:
        load_spec(write(text.replace("path: opt.lr", "path: opt.lrr")))
    assert info.value.line == 6 and info.value.field == "search_space[0].path"
    assert "'opt.lrr' adds key 'lrr', which opt does not have; did you mean 'lr'?" in str(
        info.value
    )
    # ... unless the dimension says the trainer reads a key the config leaves out...
    new_key = "path: opt.momentum, new_key: true"
    spec = load_spec(write(text.replace("path: opt.lr", new_key)))
    assert spec.search_space[0].path == "opt.momentum" and spec.search_space[0].new_key
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


# fmt: off
BAD_TRAINER = [
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
]
# fmt: on


test_bad_trainer = bad_file_test(BAD_TRAINER)
