"""Section batch_size."""

from __future__ import annotations

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
)


def test_builtin_trainer_batch_size_path_is_fixed(write: Callable[..., Path]) -> None:
    # A custom path would pass the schema checks, but the built-in trainer only reads
    # data.batch_size: the found size would be written where nothing uses it.
    path = write(BASE + "batch_size: {auto: true, path: epochs}\n")
    with pytest.raises(SpecError, match="built-in trainer uses 'data.batch_size'") as info:
        load_spec(path)
    assert info.value.field == "batch_size.path"


# fmt: off
BAD_BATCH = [
    case("batch-path", BASE + "batch_size:\n  auto: true\n  path: data.batchsize\n", 9,
         "batch_size.path", "no field 'batchsize' in data", "did you mean 'batch_size'?"),
    case("batch-path-searched", BASE + "batch_size: {auto: true, path: optim.optim_args.lr}\n", 7,
         "batch_size.path", "also search_space[0].path"),
    case("batch-path-not-int", BASE + "batch_size: {auto: true, path: optim.weight_decay}\n", 7,
         "batch_size.path", "must be an integer field", "takes float"),
    case("batch-max-below-min", BASE + "batch_size:\n  min: 64\n  max: 32\n", 9, "batch_size.max",
         "an integer >= 64, got 32"),
    case("batch-start-out-of-range", BASE + "batch_size: {min: 8, max: 32, start: 64}\n", 7,
         "batch_size.start", "in [min, max] = [8, 32]"),
    case("batch-tolerance", BASE + "batch_size: {tolerance: 0.7}\n", 7, "batch_size.tolerance",
         "a number > 0 and <= 0.5, got 0.7"),
    case("batch-multiple", BASE + "batch_size: {min: 9, max: 15, multiple_of: 16}\n", 7,
         "batch_size.multiple_of", "no multiple of 16 lies in [min, max] = [9, 15]"),
    case("batch-memory-key", BASE + "batch_size:\n  memory_keys:\n    - model.buildr\n", 9,
         "batch_size.memory_keys[0]", "memory key 'model.buildr'", "did you mean 'builder'?"),
    case("batch-effective-no-auto", BASE + "batch_size: {effective: 256}\n", 7,
         "batch_size.effective", "needs batch_size.auto: true"),
]
# fmt: on


test_bad_batch_size = bad_file_test(BAD_BATCH)
