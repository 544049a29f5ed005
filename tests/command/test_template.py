"""``trainer.command`` placeholders: parsing (what the loader refuses) and rendering."""

from __future__ import annotations

from typing import Any

import pytest

from dvt_hpo.command.template import TemplateError, placeholders, render, render_value


@pytest.mark.parametrize(
    ("arg", "names"),
    [
        ("train.py", []),
        ("{lr}", ["lr"]),
        ("--lr={lr}", ["lr"]),
        ("{optim.lr}/{layers[0].units}", ["optim.lr", "layers[0].units"]),
        ("{{not}} {lr} }}", ["lr"]),
    ],
)
def test_placeholders(arg: str, names: list[str]) -> None:
    assert placeholders(arg) == names


@pytest.mark.parametrize(
    ("arg", "error"),
    [
        ("--lr={lr", "write {{ and }} for literal braces"),
        ("--lr=lr}", "write {{ and }} for literal braces"),
        ("{}", "empty placeholder {}"),
        ("{lr:.3f}", "{lr:.3f} has a format spec or conversion; write {lr}"),
        ("{lr!r}", "{lr!r} has a format spec or conversion"),
    ],
)
def test_bad_templates(arg: str, error: str) -> None:
    with pytest.raises(TemplateError) as info:
        placeholders(arg)
    assert error in str(info.value)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("adam", "adam"),
        (True, "true"),
        (False, "false"),
        (None, "null"),
        (3, "3"),
        (1e-4, "0.0001"),
        (1e-05, "1e-05"),
        (0.1 + 0.2, "0.30000000000000004"),  # exact: the value the study records
        (float("nan"), "nan"),
        ([1, "a"], '[1,"a"]'),
        ({"k": [1.5]}, '{"k":[1.5]}'),
    ],
)
def test_values_render_as_a_command_line_expects(value: Any, text: str) -> None:
    assert render_value(value) == text


def test_render_replaces_each_placeholder_and_keeps_literal_braces() -> None:
    values = {"lr": 1e-05, "a.b": True}
    argv = render(["x", "--lr={lr}", "{{{a.b}}}", "{lr}{lr}"], values.__getitem__)
    assert argv == ["x", "--lr=1e-05", "{true}", "1e-051e-05"]
