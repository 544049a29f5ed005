"""dvt_hpo/views/cli_reference.py: the command-line reference is the parser; every flag explained."""

from __future__ import annotations

import argparse

import pytest

from dvt_hpo.cli import build_parser
from dvt_hpo.views import cli_reference


def test_every_command_and_argument_has_its_help() -> None:
    assert cli_reference.unexplained() == [], "add help=... to these in dvt_hpo/cli.py"


def test_the_page_names_every_command_and_every_option() -> None:
    page = cli_reference.markdown()
    names = [name for name, _, _ in cli_reference.commands()]
    assert {"run", "validate", "best", "status", "dashboard", "submit", "cancel", "train"} <= set(
        names
    )
    for name, _, parser in cli_reference.commands():
        assert f"## dvt-hpo {name}" in page
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in page, (name, option)
    assert "| `--workers K` | `1` | run K orchestrators" in page


def test_a_flag_without_help_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    def parser_with_a_bare_flag() -> argparse.ArgumentParser:
        parser = build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices["run"].add_argument("--bare", action="store_true")
        return parser

    monkeypatch.setattr(cli_reference, "build_parser", parser_with_a_bare_flag)

    assert cli_reference.unexplained() == ["dvt-hpo run --bare: no help"]
