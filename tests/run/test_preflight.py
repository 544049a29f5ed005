"""What run and validate check beyond the file: the entry-point function (read, never run), the
built-in trainer's own config, the GPUs a CUDA device needs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dvt_hpo.exceptions import SpecError
from dvt_hpo.run.preflight import find_entrypoint, load_runnable
from dvt_hpo.studyfile import load_spec

TOY = """\
study:
  name: s
objective: {metric: loss}
trainer:
  entrypoint: ENTRY
  config: {x: 0.5}
search_space:
  - {name: x, path: x, kind: float, low: 0.0, high: 1.0}
"""
ENTRY_LINE = 5

TRAINER = """\
import os
from json import dumps as imported_name
CONSTANT = 1
a, (b, tupled) = 1, (2, 3)
annotated: int = 3
if os.environ.get("X"):
    def conditional(config, ctx):
        return {}
else:
    conditional = None


def run(config, ctx):
    raise SystemExit("the trainer must never run during validate")


async def run_async(config, ctx):
    return {}


class Trainer:
    def fit(self, config, ctx):
        return {}

    value = 1

raise SystemExit("the module must never be imported during validate")
"""


def study(write: Callable[..., Path], entry: str, module_text: str | None = TRAINER) -> Path:
    path = write(TOY.replace("ENTRY", entry))
    if module_text is not None:
        (path.parent / "mytrainer.py").write_text(module_text)
    return path


@pytest.mark.parametrize(
    "attr",
    [
        "run",
        "run_async",
        "Trainer",
        "Trainer.fit",
        "Trainer.value",
        "CONSTANT",
        "tupled",
        "annotated",
        "imported_name",
        "conditional",
    ],
)
def test_names_a_module_defines_count(write: Callable[..., Path], attr: str) -> None:
    spec = load_runnable(study(write, f"mytrainer:{attr}"))
    found = find_entrypoint(spec.trainer.entrypoint, spec.path.parent)
    assert found.defined is True and found.note is None


@pytest.mark.parametrize(
    ("attr", "says"),
    [
        ("runn", "did you mean 'run'"),
        ("train", "defines no 'train'"),
        ("Trainer.fitt", "did you mean 'fit'"),
    ],
)
def test_missing_function_is_refused_at_the_entrypoint_line(
    write: Callable[..., Path], attr: str, says: str
) -> None:
    path = study(write, f"mytrainer:{attr}")
    with pytest.raises(SpecError) as info:
        load_runnable(path)
    err = info.value
    assert (err.file, err.line, err.field) == (str(path), ENTRY_LINE, "trainer.entrypoint")
    assert says in err.message and str(path.parent / "mytrainer.py") in err.message, str(err)


def test_star_import_cannot_be_ruled_out(write: Callable[..., Path]) -> None:
    # The module does `from json import *`: a name it does not define may come from there.
    text = "from json import *  # noqa: F403\n" + TRAINER
    spec = load_runnable(study(write, "mytrainer:loads", text))
    found = find_entrypoint(spec.trainer.entrypoint, spec.path.parent)
    assert found.defined is None and "import *" in (found.note or "")


def test_compiled_module_is_skipped_with_a_note(write: Callable[..., Path]) -> None:
    spec = load_runnable(study(write, "math:sqrt", None))
    found = find_entrypoint(spec.trainer.entrypoint, spec.path.parent)
    assert found.defined is None
    assert "no Python source" in (found.note or "") and "skipped" in (found.note or "")


def test_file_path_gets_a_module_hint(write: Callable[..., Path]) -> None:
    path = study(write, "mytrainer.py:run")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    err = info.value
    assert (err.line, err.field) == (ENTRY_LINE, "trainer.entrypoint")
    assert "write 'mytrainer:run'" in err.message, str(err)


def test_file_path_with_folders_gets_a_module_hint(write: Callable[..., Path]) -> None:
    path = study(write, "trainers/mytrainer.py:run")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert "write 'trainers.mytrainer:run'" in info.value.message, str(info.value)


# -- the built-in trainer's own checks --------------------------------------------------------

DIGITS = """\
study:
  name: s
trainer:
  config:
    epochs: 1
    model: {builder: BUILDER}
    devices: {device: DEVICE}
search_space:
  - {name: lr, path: optim.optim_args.lr, kind: float, low: 1.0e-4, high: 0.1, log: true}
"""


def digits(write: Callable[..., Path], builder: str = "cnn", device: str = "auto") -> Path:
    return write(DIGITS.replace("BUILDER", builder).replace("DEVICE", device))


def test_unknown_builder_gets_a_did_you_mean(write: Callable[..., Path]) -> None:
    path = digits(write, "cnnn")
    with pytest.raises(SpecError) as info:
        load_runnable(path)
    err = info.value
    assert (err.line, err.field) == (6, "trainer.config.model.builder"), str(err)
    assert "did you mean 'cnn'" in err.message and "mlp" in err.message, str(err)


def test_unknown_builder_among_searched_choices(write: Callable[..., Path]) -> None:
    text = DIGITS.replace("BUILDER", "cnn").replace("DEVICE", "auto")
    text += "  - {name: arch, path: model.builder, kind: categorical, choices: [cnn, resnet]}\n"
    with pytest.raises(SpecError) as info:
        load_runnable(write(text))
    err = info.value
    assert (err.line, err.field) == (10, "search_space[1].choices"), str(err)
    assert "'resnet'" in err.message, str(err)


def test_builder_by_import_path_is_read_like_the_entry_point(write: Callable[..., Path]) -> None:
    path = digits(write, "'mytrainer:make_net'")
    (path.parent / "mytrainer.py").write_text("def make_model(in_shape, n):\n    pass\n")
    with pytest.raises(SpecError) as info:
        load_runnable(path)
    assert "did you mean 'make_model'" in info.value.message, str(info.value)
    (path.parent / "mytrainer.py").write_text("def make_net(in_shape, n):\n    pass\n")
    load_runnable(path)


def test_unknown_data_kind_names_the_kinds(write: Callable[..., Path]) -> None:
    path = write(DIGITS.replace("BUILDER", "cnn").replace("{device: DEVICE}", "{}") + "")
    text = path.read_text().replace("    epochs: 1\n", "    epochs: 1\n    data: {kind: cifar}\n")
    with pytest.raises(SpecError) as info:
        load_runnable(write(text))
    assert "imagefolder" in info.value.message and "'cifar'" in info.value.message


@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_cuda_device_without_a_gpu_is_refused(
    write: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, device: str
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(SpecError) as info:
        load_runnable(digits(write, device=device))
    err = info.value
    assert (err.line, err.field) == (7, "trainer.config.devices.device"), str(err)
    assert "no GPU" in err.message and "'cpu'" in err.message, str(err)


def test_cuda_index_beyond_the_trial_gpus_is_refused(
    write: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    path = digits(write, device="cuda:1")
    load_runnable(path)  # one trial at a time: both GPUs are its
    with pytest.raises(SpecError) as info:
        load_runnable(path, ["trials.parallel=2"])
    assert "cuda:1" in info.value.message and "1 GPU" in info.value.message, str(info.value)


def test_cuda_device_with_trials_on_cpu_is_refused(
    write: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(SpecError) as info:
        load_runnable(digits(write, device="cuda"), ["trials.devices=cpu"])
    assert "trials.devices" in info.value.message, str(info.value)


def test_module_with_a_syntax_error_is_refused_naming_its_line(write: Callable[..., Path]) -> None:
    path = study(write, "mytrainer:run", "def run(config, ctx):\n    return {\n")
    with pytest.raises(SpecError) as info:
        load_runnable(path)
    assert f"{path.parent / 'mytrainer.py'}:2" in info.value.message, str(info.value)
    assert "SyntaxError" in info.value.message
