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


OPTIM = """\
study: {name: s}
objective: {metric: macro_f1}
trials: {devices: cpu}
trainer:
  config:
    optim: {target: OPTIM, optim_args: {ARGS}}
    sched: {target: SCHED, sched_args: {SARGS}}
search_space:
  - {name: x, path: PATH, kind: categorical, choices: CHOICES}
"""


def optim(
    target: str = "torch.optim.SGD",
    args: str = "lr: 0.1",
    sched: str = "torch.optim.lr_scheduler.StepLR",
    sched_args: str = "step_size: 2",
    path: str = "optim.optim_args.momentum",
    choices: str = "[0.0, 0.9]",
) -> str:
    text = OPTIM.replace("OPTIM", target).replace("SARGS", sched_args).replace("ARGS", args)
    text = text.replace("SCHED", sched).replace("PATH", path)
    return text.replace("CHOICES", choices)


def test_the_optimizer_keywords_read_from_the_source_are_torchs_own() -> None:
    """What the orchestrator reads without torch is what the classes accept after the
    parameters (optimizer) or the optimizer (scheduler)."""
    import torch

    from dvt_hpo.run.builders import class_keywords

    for target, cls in [
        ("torch.optim.SGD", torch.optim.SGD),
        ("torch.optim.AdamW", torch.optim.AdamW),
        ("torch.optim.lr_scheduler.CosineAnnealingLR", torch.optim.lr_scheduler.CosineAnnealingLR),
        ("torch.optim.lr_scheduler:OneCycleLR", torch.optim.lr_scheduler.OneCycleLR),
    ]:
        params = [p for p in inspect.signature(cls.__init__).parameters if p != "verbose"]
        found = class_keywords(target, Path.cwd())
        assert found.exists and found.keywords is not None, target
        assert [k for k in found.keywords if k != "verbose"] == params[2:], target


@pytest.mark.parametrize(
    ("text", "line", "field", "says"),
    [
        (
            optim(args="lrr: 0.1"),
            6,
            "trainer.config.optim.optim_args.lrr",
            "optimizer 'torch.optim.SGD' takes no argument 'lrr'; did you mean 'lr'? (it takes: lr,",
        ),
        (
            optim(target="torch.optim.AdamWW"),
            6,
            "trainer.config.optim.target",
            "unknown optimizer 'torch.optim.AdamWW': torch.optim defines no 'AdamWW'; did you mean "
            "'torch.optim.AdamW'?",
        ),
        (
            optim(path="optim.target", choices="[torch.optim.SGD, torch.optim.AdamWW]"),
            9,
            "search_space[0].choices[1]",
            "did you mean 'torch.optim.AdamW'?",
        ),
        (
            optim(path="optim.optim_args.momentun"),
            9,
            "search_space[0].path",
            "optimizer 'torch.optim.SGD' takes no argument 'momentun'; did you mean 'momentum'?",
        ),
        (
            optim(
                args="lr: 0.1, betas: [0.9, 0.99]",
                path="optim.target",
                choices="[torch.optim.AdamW, torch.optim.SGD]",
            ),  # fmt: skip
            6,
            "trainer.config.optim.optim_args.betas",
            "(optim.target is searched: every choice must take it, torch.optim.AdamW, "
            "torch.optim.SGD)",
        ),
        (
            optim(target="torch.optim.LBFGS"),
            6,
            "trainer.config.optim.target",
            "optimizer 'torch.optim.LBFGS' takes no argument 'weight_decay', which the built-in "
            "trainer always passes (optim.weight_decay)",
        ),
        (
            optim(target="torch.optimm.SGD"),
            6,
            "trainer.config.optim.target",
            "module 'torch.optimm' cannot be found",
        ),
        (
            optim(sched="torch.optim.lr_scheduler.StepLr"),
            7,
            "trainer.config.sched.target",
            "did you mean 'torch.optim.lr_scheduler.StepLR'?",
        ),
        (
            optim(sched_args="step_sise: 2"),
            7,
            "trainer.config.sched.sched_args.step_sise",
            "scheduler 'torch.optim.lr_scheduler.StepLR' takes no argument 'step_sise'; did you "
            "mean 'step_size'?",
        ),
        (
            optim(path="sched.sched_args.gama", choices="[0.1, 0.5]"),
            9,
            "search_space[0].path",
            "did you mean 'gamma'?",
        ),
    ],
)
def test_an_optimizer_or_scheduler_mistake_is_refused(
    write: Callable[..., Path], text: str, line: int, field: str, says: str
) -> None:
    with pytest.raises(SpecError) as info:
        load_runnable(write(text))
    assert (info.value.line, info.value.field) == (line, field), str(info.value)
    assert says in info.value.message, info.value.message


def test_what_the_source_cannot_tell_is_left_to_the_trial(write: Callable[..., Path]) -> None:
    """A user's optimizer: read from its module (never imported); ``**kwargs``, or a name a
    star import may provide, takes anything."""
    write("from torch.optim import SGD\n\n\nclass Mine(SGD):\n    pass\n\n\n"
          "class Open(SGD):\n    def __init__(self, params, **kwargs):\n        raise SystemExit\n",
          name="myopt.py")  # fmt: skip
    write("from torch.optim import *\n", name="star.py")
    with pytest.raises(SpecError, match="optimizer 'myopt:Mine' takes no argument 'lrr'"):
        load_runnable(write(optim(target="myopt:Mine", args="lrr: 0.1")))
    with pytest.raises(SpecError, match="myopt defines no 'Mne'; did you mean 'myopt:Mine'"):
        load_runnable(write(optim(target="myopt:Mne")))
    load_runnable(write(optim(target="myopt:Open", args="anything: 1")))
    load_runnable(write(optim(target="star.AdamWW", args="anything: 1")))


def test_keywords_every_optimizer_takes_are_accepted(write: Callable[..., Path]) -> None:
    spec = load_runnable(
        write(optim(path="optim.target", choices="[torch.optim.SGD, torch.optim.Adam]"))
    )
    assert spec.search_space[0].choices == ("torch.optim.SGD", "torch.optim.Adam")
