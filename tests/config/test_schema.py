"""The one schema engine (dvt_hpo.config.schema): strict conversion, rules, paths, type checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pytest

from dvt_hpo.config.schema import (
    defaults,
    domain,
    field_type_at,
    from_mapping,
    from_wire_mapping,
    read_fields,
    rule,
    value_fits_type,
)
from dvt_hpo.exceptions import SpecError
from dvt_hpo.train.config import TrainerConfig


@dataclass(frozen=True)
class Section:
    count: int = rule(1, ge=1)
    share: float | None = rule(None, gt=0, le=0.5)
    mode: Literal["a", "b"] = rule("a")
    label: str | None = rule(None, what="a label")
    raw: Any = domain("x")


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"count": 0}, "s.count", "must be an integer >= 1, got 0"),
        ({"count": True}, "s.count", "must be an integer >= 1, got True (bool)"),
        ({"share": 0.7}, "s.share", "must be a number > 0 and <= 0.5 or null, got 0.7"),
        ({"share": float("nan")}, "s.share", "must be a number > 0 and <= 0.5 or null, got nan"),
        ({"mode": "c"}, "s.mode", "must be one of a, b, got 'c' (str)"),
        ({"mode": "bb"}, "s.mode", "must be one of a, b, got 'bb' (str); did you mean 'b'?"),
        ({"label": ""}, "s.label", "must be a label or null, got '' (str)"),
        (
            {"cont": 1},
            "s.cont",
            "unknown key 'cont'; did you mean 'count'? (allowed keys: count, share, mode, label, raw)",
        ),
    ],
)
def test_rules_word_what_is_allowed(data: dict, field: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        read_fields(Section, data, path="s")
    assert (info.value.field, info.value.message) == (field, message)


def test_read_fields_converts_passes_domain_fields_raw_and_leaves_defaults() -> None:
    with pytest.raises(SpecError, match="got 0"):
        read_fields(Section, {"share": 0})
    got = read_fields(Section, {"share": 0.25, "raw": {"any": object}})
    assert got["share"] == 0.25 and got["raw"] == {"any": object}
    assert read_fields(Section, None, what="section 's'") == {}
    assert defaults(Section) == {"count": 1, "share": None, "mode": "a", "label": None, "raw": "x"}
    assert from_mapping(Section, {"count": 3}) == Section(count=3)


def test_field_type_at_walks_sections_free_dicts_and_optionals() -> None:
    assert field_type_at(TrainerConfig, "epochs") is int
    assert field_type_at(TrainerConfig, "optim.optim_args.lr") is Any
    assert field_type_at(TrainerConfig, "model.kwargs.width") is Any
    assert field_type_at(TrainerConfig, "optim.weight_decay") is float
    assert field_type_at(TrainerConfig, "sched.warmup.steps") == int | None
    assert field_type_at(TrainerConfig, "precision.amp_dtype") == Literal["fp16", "bf16", "fp32"]
    assert field_type_at(TrainerConfig, "data.image_size") == int | None


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("optim.lr", ["no field 'lr' in optim", "'optim_args.lr'"]),
        ("sched.warmpu.steps", ["did you mean 'warmup'"]),
        ("epochs.x", ["'epochs' is int and has no sub-key 'x'"]),
        ("", ["empty path"]),
    ],
)
def test_field_type_at_unknown_paths(path: str, words: list[str]) -> None:
    with pytest.raises(KeyError) as info:
        field_type_at(TrainerConfig, path)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    ("value", "tp", "fits"),
    [
        (3, float, True),
        (3.5, float, True),
        (True, float, False),
        (True, int, False),
        (3, int, True),
        (3.0, int, False),
        (None, int | None, True),
        (None, int, False),
        ("bf16", Literal["fp16", "bf16"], True),
        ("fp8", Literal["fp16", "bf16"], False),
        (True, Literal[1], False),
        ("x", str, True),
        (1, str, False),
        ([1, 2], list[int], True),
        ([1, "a"], list[int], False),
        ((1, 2), tuple[int, ...], True),
        ({"a": 1}, Any, True),
        (object(), Any, False),
        ({"a": 1.5}, dict[str, float], True),
        ({"builder": "mlp"}, field_type_at(TrainerConfig, "model"), True),
        ({"builder": 3}, field_type_at(TrainerConfig, "model"), False),
    ],
)
def test_value_fits_type(value: Any, tp: Any, fits: bool) -> None:
    assert value_fits_type(value, tp) is fits


# -- what crosses a process boundary ------------------------------------------------------


@dataclass(frozen=True)
class _Inner:
    n: int = rule(1, ge=1)
    tags: tuple[str, ...] = domain(())


@dataclass(frozen=True)
class _Message:
    name: str
    inner: _Inner = _Inner()


def test_wire_mode_builds_nested_dataclasses_and_tuples() -> None:
    msg = from_wire_mapping(_Message, {"name": "a", "inner": {"n": 3, "tags": ["x"]}}, "a message")
    assert msg == _Message("a", _Inner(3, ("x",)))


def test_wire_mode_checks_shape_not_the_study_files_value_rules() -> None:
    # n >= 1 is the study file's rule, checked when it was loaded; a message keeps its value.
    assert from_wire_mapping(_Message, {"name": "a", "inner": {"n": 0}}, "m").inner.n == 0
    with pytest.raises(TypeError, match=r"^m inner.tags: expected a list of str, got 'x'"):
        from_wire_mapping(_Message, {"name": "a", "inner": {"tags": "x"}}, "m", TypeError)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({}, r"^m: missing required key 'name'"),
        ({"name": "a", "inner": {"m": 1}}, r"^m inner: unknown key 'm' \(allowed keys: n, tags\)"),
        ({"name": 1}, r"^m name: expected str, got 1"),
        ([], r"^m: expected a mapping"),
    ],
)
def test_wire_mode_errors_name_the_message_and_field(data: Any, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        from_wire_mapping(_Message, data, "m")


def test_wire_mode_does_not_leak_into_study_file_reading() -> None:
    with pytest.raises(ValueError):
        from_wire_mapping(_Message, {"name": 1}, "m")
    with pytest.raises(SpecError, match=">= 1"):
        from_mapping(_Message, {"name": "a", "inner": {"n": 0}})
