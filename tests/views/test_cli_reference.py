"""dvt_hpo/views/cli_reference.py: the command-line reference is the parser; every flag explained."""

from __future__ import annotations

import argparse

from dvt_hpo.cli import build_parser
from dvt_hpo.views import cli_reference


def test_every_command_and_argument_has_its_help() -> None:
    assert cli_reference.unexplained(build_parser()) == [], (
        "add help=... to these in dvt_hpo/cli.py"
    )


def test_the_page_names_every_command_and_every_option() -> None:
    page = cli_reference.markdown(build_parser())
    names = [name for name, _, _ in cli_reference.commands(build_parser())]
    assert {"run", "validate", "best", "status", "dashboard", "submit", "cancel", "train"} <= set(
        names
    )
    for name, _, parser in cli_reference.commands(build_parser()):
        assert f"## dvt-hpo {name}" in page
        for action in parser._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in page, (name, option)
    assert "| `--workers K` | `1` | run K orchestrators" in page


def test_a_flag_without_help_is_reported() -> None:
    def parser_with_a_bare_flag() -> argparse.ArgumentParser:
        parser = build_parser()
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices["run"].add_argument("--bare", action="store_true")
        return parser

    assert cli_reference.unexplained(parser_with_a_bare_flag()) == ["dvt-hpo run --bare: no help"]
