"""Section search_space: dimensions, when conditions, paths against the trainer config."""

from __future__ import annotations

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
    DIM_LINE,
    bad_file_test,
    case,
    decay_when,
    more_dims,
    with_dim,
)


def test_dimension_name_defaults_to_path(write: Callable[..., Path]) -> None:
    spec = load_spec(write(with_dim("{path: ema.enabled, kind: bool}")))
    assert spec.search_space[0].name == "ema.enabled"


def test_conditional_dimensions_may_share_a_path_when_exclusive(write: Callable[..., Path]) -> None:
    text = textwrap.dedent(
        """\
        study: {name: s}
        trainer: {config: {}}
        search_space:
          - {name: opt, path: optim.target, kind: categorical, choices: [torch.optim.SGD, torch.optim.Adam]}
          - {name: lr_sgd, path: optim.optim_args.lr, kind: float, low: 0.01, high: 1.0, when: {opt: torch.optim.SGD}}
          - {name: lr_adam, path: optim.optim_args.lr, kind: float, low: 1.0e-5, high: 0.01, when: {opt: [torch.optim.Adam]}}
        """
    )
    spec = load_spec(write(text))
    assert [d.name for d in spec.search_space] == ["opt", "lr_sgd", "lr_adam"]
    with pytest.raises(SpecError, match="is the same as search_space\\[1\\].path"):
        load_spec(
            write(text.replace("when: {opt: [torch.optim.Adam]}", "when: {opt: [torch.optim.SGD]}"))
        )


# fmt: off
BAD_SEARCH = [
    case("space-missing", BASE.split("search_space:")[0], 1, "search_space",
         "missing required section 'search_space'"),
    case("space-not-list", BASE.replace(DIM_LINE, "  lr: 1"), 5, "search_space",
         "must be a list of dimensions", "got {'lr': 1} (dict)"),
    case("space-empty", BASE.replace("search_space:\n" + DIM_LINE, "search_space: []"), 5,
         "search_space", "at least one dimension"),
    case("dim-unknown-key",
         with_dim("{name: lr, path: optim.optim_args.lr, kind: float, lw: 0.1, high: 1}"), 6,
         "search_space[0].lw", "unknown key 'lw' in a dimension", "did you mean 'low'?"),
    case("dim-kind", DIM_LINE.join(BASE.split(DIM_LINE)).replace("kind: float", "kind: flot"), 6,
         "search_space[0].kind", "got 'flot'", "did you mean 'float'?"),
    case("dim-no-kind", with_dim("{name: lr, path: optim.optim_args.lr, low: 0.1, high: 1}"), 6,
         "search_space[0]", "needs 'kind'"),
    case("dim-no-path", with_dim("{name: lr, kind: float, low: 0.1, high: 1}"), 6,
         "search_space[0]", "needs 'path'"),
    case("dim-path-segment", BASE.replace("optim.optim_args.lr", "optim.optimargs.lr"), 6,
         "search_space[0].path", "'optim.optimargs.lr' is not in the trainer config",
         "no field 'optimargs' in optim", "did you mean 'optim_args'?"),
    case("dim-path-top", BASE.replace("optim.optim_args.lr", "optm.lr"), 6, "search_space[0].path",
         "did you mean 'optim'?"),
    case("dim-path-section",
         with_dim("{name: m, path: model, kind: categorical, choices: [a, b]}"), 6,
         "search_space[0].choices[0]", "model takes a mapping (ModelConfig)"),
    case("dim-low-gt-high", BASE.replace("high: 0.1", "high: 1.0e-5"), 6, "search_space[0].low",
         "low must be <= high", "low=0.0001, high=1e-05"),
    case("dim-log-low-zero", BASE.replace("low: 1.0e-4", "low: 0"), 6, "search_space[0].low",
         "log sampling needs low > 0, got low=0"),
    case("dim-step-and-log", BASE.replace("log: true", "log: true, step: 0.01"), 6,
         "search_space[0].step", "step and log cannot be used together", "step=0.01"),
    case("dim-int-float-bound",
         with_dim("{name: e, path: epochs, kind: int, low: 1.0, high: 3}"), 6,
         "search_space[0].low", "int bounds must be integers, got 1.0 (float); write 1"),
    case("dim-int-log-step",
         with_dim("{name: e, path: epochs, kind: int, low: 1, high: 9, step: 2, log: true}"), 6,
         "search_space[0].step", "step and log cannot be used together", "step=2"),
    case("dim-float-into-int",
         with_dim("{name: e, path: epochs, kind: float, low: 1, high: 3}"), 6,
         "search_space[0].low", "produces 1.0", "epochs takes int", "use kind: int"),
    case("dim-config-rule", with_dim("{name: e, path: epochs, kind: int, low: 0, high: 3}"), 6,
         "search_space[0].low", "can produce 0", "epochs: expected >= 1, got 0"),
    case("dim-config-rule-high",
         with_dim("{name: v, path: data.val_fraction, kind: float, low: 0.1, high: 1.0}"), 6,
         "search_space[0].high", "can produce 1.0", "expected 0 < val_fraction < 1"),
    case("dim-literal",
         with_dim("{name: a, path: precision.amp_dtype, kind: categorical, choices: [bf16, fp8]}"),
         6, "search_space[0].choices[1]", "produces 'fp8'", "one of 'fp16', 'bf16', 'fp32'"),
    case("dim-choice-type",
         with_dim("{name: w, path: model.kwargs.w, kind: categorical, choices: [1, [2, 3]]}"),
         6, "search_space[0].choices[1]", "each choice must be null, a boolean", "[2, 3] (list)"),
    case("dim-choices-empty",
         with_dim("{name: w, path: model.kwargs.w, kind: categorical, choices: []}"), 6,
         "search_space[0].choices", "non-empty list"),
    case("dim-choice-duplicate",
         with_dim("{name: w, path: model.kwargs.w, kind: categorical, choices: [1, 2, 1]}"), 6,
         "search_space[0].choices[2]", "duplicate choice 1 (also choices[0])"),
    case("dim-bool-with-low", with_dim("{name: e, path: ema.enabled, kind: bool, low: 0}"), 6,
         "search_space[0].low", "'low' does not apply to kind 'bool'"),
    case("dim-categorical-with-low",
         with_dim("{name: w, path: model.kwargs.w, kind: categorical, choices: [1], high: 2}"),
         6, "search_space[0].high", "'high' does not apply to kind 'categorical'", "takes choices"),
    case("dim-duplicate-name",
         BASE + "  - {name: lr, path: optim.weight_decay, kind: float, low: 0, high: 0.1}\n", 7,
         "search_space[1].name", "duplicate dimension name 'lr' (also search_space[0])"),
    case("dim-duplicate-path",
         BASE + "  - {name: lr2, path: optim.optim_args.lr, kind: float, low: 0.1, high: 0.2}\n", 7,
         "search_space[1].path", "is the same as search_space[0].path"),
    case("dim-overlapping-path",
         BASE + "  - {name: o, path: optim.optim_args, kind: categorical, choices: [null]}\n", 7,
         "search_space[1].path", "overlaps search_space[0].path"),
    case("when-later",
         more_dims(decay_when("{e: true}"),
                   "{name: e, path: ema.enabled, kind: bool}"),
         7, "search_space[1].when.e", "refers to 'e', which is defined later"),
    case("when-unknown",
         more_dims(decay_when("{lrr: 0.1}")),
         7, "search_space[1].when.lrr", "unknown dimension 'lrr'", "did you mean 'lr'?"),
    case("when-continuous",
         more_dims(decay_when("{lr: 0.1}")),
         7, "search_space[1].when.lr", "continuous float dimension"),
    case("when-impossible-value",
         more_dims("{name: w, path: model.kwargs.w, kind: categorical, choices: [16, 32]}",
                   decay_when("{w: [16, 48]}")),
         8, "search_space[2].when.w[1]", "'w' never takes 48 (int)", "one of [16, 32]"),
    case("when-bool-not-int",
         more_dims("{name: e, path: ema.enabled, kind: bool}",
                   decay_when("{e: 1}")),
         8, "search_space[2].when.e", "'e' never takes 1 (int)", "true or false"),
]
# fmt: on


test_bad_search_space = bad_file_test(BAD_SEARCH)


# -- a path that adds a key: refused as a typo, unless said ----------------------------------

NEW_KEY = """\
study: {name: s}
objective: {metric: loss}
trainer:
  entrypoint: mytrain:run
  config: {hidden: 32, opt: {lr: 0.1}}
search_space:
  - {name: hidden, path: PATH, kind: categorical, choices: [16, 32]}
"""


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("hiden", "'hiden' adds key 'hiden', which trainer.config does not have; did you mean "
         "'hidden'? (it has: hidden, opt)"),
        ("opt.lrr", "'opt.lrr' adds key 'lrr', which opt does not have; did you mean 'lr'?"),
    ],
)  # fmt: skip
def test_a_path_that_adds_a_key_is_refused_with_a_did_you_mean(
    write: Callable[..., Path], path: str, says: str
) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(write(NEW_KEY.replace("PATH", path)))
    assert (info.value.line, info.value.field) == (7, "search_space[0].path")
    assert says in info.value.message and "new_key: true" in info.value.message


def test_new_key_says_the_key_is_added_on_purpose(write: Callable[..., Path]) -> None:
    text = NEW_KEY.replace("path: PATH,", "path: dropout, new_key: true,")
    spec = load_spec(write(text))
    assert spec.search_space[0].path == "dropout" and spec.search_space[0].new_key


def test_a_command_dimension_needs_no_path_and_its_placeholder_adds_the_key(
    write: Callable[..., Path],
) -> None:
    text = """\
    study: {name: s}
    trainer:
      command: ["{python}", train.py, --lr, "{lr}"]
      config: {epochs: 2}
    search_space:
      - {name: lr, kind: float, low: 1.0e-4, high: 0.1, log: true}
    """
    spec = load_spec(write(text))
    assert (spec.search_space[0].name, spec.search_space[0].path) == ("lr", "lr")
    # Not named by the command: the key would reach no one.
    with pytest.raises(SpecError, match=r"'lr' adds key 'lr', which trainer.config does not"):
        load_spec(write(text.replace('--lr, "{lr}"', "--fast")))
    # An entry point still needs a path.
    with pytest.raises(SpecError, match="a dimension needs 'path'"):
        load_spec(write(text.replace('command: ["{python}", train.py, --lr, "{lr}"]',
                                     "entrypoint: mytrain:run")))  # fmt: skip
