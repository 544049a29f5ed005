"""What the tests of the study-file loader share: a good study, a minimal one to edit, and the
table form of a bad study file (``case``) with its check."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from dvt_hpo.exceptions import SpecError
from dvt_hpo.studyfile import load_spec

GOOD = """\
study:
  name: digits-cnn
  n_trials: 30
  sampler: {kind: tpe, seed: 0, n_startup_trials: 8}
  pruner: {kind: median, n_startup_trials: 4, n_warmup_steps: 2}
objective:
  metric: macro_f1
  reduce: last
trials:
  parallel: 2
  devices: "cuda:0,1"
  timeout_s: 600
  memory_limit: 4GiB
batch_size:
  auto: true
  path: data.batch_size
  min: 8
  max: 1024
  memory_keys: [model.builder, model.kwargs.width]
trainer:
  config:
    epochs: 3
    model: {builder: cnn, kwargs: {width: 16}}
search_space:
  - {name: lr, path: optim.optim_args.lr, kind: float, low: 1e-4, high: 1.0e-1, log: true}
  - {name: width, path: model.kwargs.width, kind: categorical, choices: [16, 32, 64]}
  - {name: depth, path: model.kwargs.depth, kind: int, low: 1, high: 4}
  - {name: ema, path: ema.enabled, kind: bool}
  - {name: decay, path: ema.decay, kind: float, low: 0.9, high: 0.999, when: {ema: true}}
tracking:
  mlflow: {tracking_uri: sqlite:///mlflow.db, experiment: digits}
"""

# A minimal valid study: bad cases below edit it, so their line numbers are easy to follow.

BASE = """\
study:
  name: s
trainer:
  config: {epochs: 1}
search_space:
  - {name: lr, path: optim.optim_args.lr, kind: float, low: 1.0e-4, high: 0.1, log: true}
"""
DIM_LINE = (
    "  - {name: lr, path: optim.optim_args.lr, kind: float, low: 1.0e-4, high: 0.1, log: true}"
)


def study_with(*lines: str) -> str:
    """BASE with lines inserted into `study:` after the name (from line 3 on)."""
    return BASE.replace("  name: s\n", "  name: s\n" + "".join(f"{line}\n" for line in lines))


def more_dims(*dims: str) -> str:
    """BASE with more dimensions after its first (from line 7 on)."""
    return BASE + "".join(f"  - {dim}\n" for dim in dims)


def with_dim(dim: str) -> str:
    """BASE with its only dimension (line 6) replaced."""
    return BASE.replace(DIM_LINE, f"  - {dim}")


def decay_when(condition: str) -> str:
    """A dimension conditional on ``condition``."""
    return f"{{name: d, path: ema.decay, kind: float, low: 0.9, high: 0.99, when: {condition}}}"


def snapshot(folder: Path) -> dict[str, float]:
    return {str(p.relative_to(folder)): p.stat().st_mtime for p in folder.rglob("*")}


SET = "<--set>"


def case(
    ident: str,
    text: str,
    line: int | None,
    field: str | None,
    *contains: str,
    overrides: Sequence[str] = (),
    file: str | None = None,
    absent: Sequence[str] = (),
) -> Any:
    """One bad study: the error must name ``file`` (default: the study file), ``line`` and
    ``field``, contain every string of ``contains`` and none of ``absent``."""
    return pytest.param(text, list(overrides), file, line, field, contains, absent, id=ident)


BAD_PARAMS = ("text", "overrides", "file", "line", "field", "contains", "absent")


def check_bad(
    write: Callable[..., Path],
    text: str,
    overrides: list[str],
    file: str | None,
    line: int | None,
    field: str | None,
    contains: list[str],
    absent: list[str],
) -> None:
    """The study ``text`` is refused with one message naming file, line and field."""
    path = write(text)
    with pytest.raises(SpecError) as info:
        load_spec(path, overrides)
    err = info.value
    message = str(err)
    expected_file = file if file is not None else str(path)
    assert (err.file, err.line, err.field) == (expected_file, line, field), message
    where = expected_file + (f":{line}" if line is not None else "")
    assert message.startswith(where + (f": {field}: " if field else ": ")), message
    for part in contains:
        assert part in message, message
    for part in absent:
        assert part not in message, message


def bad_file_test(cases: list[Any]) -> Callable[..., None]:
    """One test per row of ``cases`` (rows of :data:`BAD_PARAMS`): the file is refused with
    exit 2 at the row's file, line and field (assign it to a ``test_*`` name)."""

    @pytest.mark.parametrize(BAD_PARAMS, cases)
    def test(
        write: Callable[..., Path],
        text: str,
        overrides: list[str],
        file: str | None,
        line: int | None,
        field: str | None,
        contains: Any,
        absent: Any,
    ) -> None:
        check_bad(write, text, overrides, file, line, field, contains, absent)

    return test
