"""A built-in model's keywords checked against its builder's signature, read from the source:
a typo in ``model.kwargs`` (in the config or a search path) is refused by validate, at its line,
with a did-you-mean, before any trial runs."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

import pytest

from dvt_hpo.exceptions import SpecError
from dvt_hpo.run.builders import builder_keywords
from dvt_hpo.run.preflight import load_runnable
from dvt_hpo.train.config import BUILTIN_MODELS

DIGITS = """\
study: {name: s}
objective: {metric: macro_f1}
trials: {devices: cpu}
trainer:
  config:
    model: {builder: BUILDER, kwargs: {KWARGS}}
search_space:
  - {name: lr, path: optim.optim_args.lr, kind: float, low: 1.0e-4, high: 0.1, log: true}
  - {name: w, path: PATH, kind: categorical, choices: [8, 16]}
"""


def digits(builder: str = "cnn", kwargs: str = "width: 16", path: str = "model.kwargs.width"):
    return DIGITS.replace("BUILDER", builder).replace("KWARGS", kwargs).replace("PATH", path)


def test_the_keywords_read_from_the_source_are_the_builders_own() -> None:
    """What the orchestrator reads without torch is what build_model will accept."""
    from dvt_hpo.train.models import _resolve

    for name in BUILTIN_MODELS:
        params = inspect.signature(_resolve(name)).parameters
        assert builder_keywords(name, Path.cwd()) == tuple(params)[2:], name


@pytest.mark.parametrize(
    ("text", "line", "field", "says"),
    [
        (
            digits(kwargs="widht: 16"),
            6,
            "trainer.config.model.kwargs.widht",
            "model 'cnn' takes no argument 'widht'; did you mean 'width'? (it takes: width,",
        ),
        (
            digits(path="model.kwargs.depht"),
            9,
            "search_space[1].path",
            "model 'cnn' takes no argument 'depht'; did you mean 'depth'?",
        ),
    ],
)
def test_a_keyword_the_builder_does_not_take_is_refused(
    write: Callable[..., Path], text: str, line: int, field: str, says: str
) -> None:
    with pytest.raises(SpecError) as info:
        load_runnable(write(text))
    assert (info.value.line, info.value.field) == (line, field), str(info.value)
    assert says in info.value.message


def test_a_keyword_the_config_leaves_out_but_the_builder_takes_is_accepted(
    write: Callable[..., Path],
) -> None:
    spec = load_runnable(write(digits(kwargs="width: 16", path="model.kwargs.depth")))
    assert spec.search_space[1].path == "model.kwargs.depth"


def test_a_users_builder_is_read_from_its_module_and_kwargs_takes_anything(
    write: Callable[..., Path],
) -> None:
    write("def net(in_shape, num_classes, *, width=8):\n    raise SystemExit('imported')\n",
          name="mynets.py")  # fmt: skip
    write("def any_net(in_shape, num_classes, **kwargs):\n    pass\n", name="open.py")
    with pytest.raises(SpecError, match="model 'mynets:net' takes no argument 'depth'"):
        load_runnable(write(digits("mynets:net", "width: 4", "model.kwargs.depth")))
    load_runnable(write(digits("open:any_net", "whatever: 4", "model.kwargs.depth")))
