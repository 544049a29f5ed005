"""The command-line reference, generated from the parser ``dvt-hpo`` parses with.

:func:`markdown` renders every command of the parser it is given (:func:`dvt_hpo.cli.build_parser`,
passed in by the caller: views sit below the CLI) with its usage line
and each argument's help, at the docs site's build (``docs/hooks.py``), so the page is the
parser; :func:`unexplained` lists the commands and arguments without a help text, and a test
fails while it lists anything. The help lives in ``add_argument(..., help="...")``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

__all__ = ["commands", "markdown", "unexplained"]


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    raise LookupError("the parser has no commands")


def commands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, str | None, argparse.ArgumentParser]]:
    """``(name, its help, its parser)`` of each command, in the parser's order."""
    sub = _subparsers(parser)
    helps = {a.dest: a.help for a in sub._choices_actions}
    for name, parser in sub.choices.items():
        yield name, helps.get(name), parser


def _arguments(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        yield action


def unexplained(parser: argparse.ArgumentParser) -> list[str]:
    """Each command and argument whose help is missing (``None``, empty or suppressed)."""
    problems = []
    for action in _arguments(parser):
        if not action.help or action.help == argparse.SUPPRESS:
            problems.append(f"dvt-hpo {'/'.join(action.option_strings)}: no help")
    for name, help_text, command in commands(parser):
        if not help_text:
            problems.append(f"dvt-hpo {name}: no help")
        for action in _arguments(command):
            if not action.help or action.help == argparse.SUPPRESS:
                shown = "/".join(action.option_strings) or action.dest
                problems.append(f"dvt-hpo {name} {shown}: no help")
    return problems


def _usage(parser: argparse.ArgumentParser) -> str:
    # A fixed width, so the page does not depend on the terminal that builds it.
    formatter = argparse.HelpFormatter(parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _shown(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest.upper()}`"
    if action.nargs == 0:
        return ", ".join(f"`{o}`" for o in action.option_strings)
    metavar = action.metavar or action.dest.upper()
    return ", ".join(f"`{o} {metavar}`" for o in action.option_strings)


def _default(action: argparse.Action) -> str:
    default = action.default
    if action.nargs == 0 or default in (None, [], argparse.SUPPRESS):
        return ""
    return f"`{default}`"


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def markdown(parser: argparse.ArgumentParser) -> str:
    """The command-line reference page (Markdown)."""
    top = parser
    lines = [
        "# Command-line reference",
        "",
        "Generated from `dvt-hpo`'s argument parser (`dvt_hpo/cli.py`; `python docs/hooks.py` "
        "rewrites it, the docs build checks it current). "
        "Exit codes: 0 done, 1 runtime failure, 2 bad input (one message naming the file, "
        "line, field, value and what is allowed; nothing written), 130 interrupted (rerun "
        "the same command to resume), 141 the reader of its output closed the pipe. Every "
        "command that takes `--set` reads the study file "
        "as `run` does: give the same `--set`s to name the same study.",
        "",
        "```text",
        _usage(top),
        "```",
        "",
    ]
    lines += [f"- {_shown(a)}: {_cell(a.help or '')}" for a in _arguments(top)]
    lines.append("")
    for name, help_text, command in commands(top):
        said = _cell(help_text or "")
        lines += [f"## dvt-hpo {name}", "", said[:1].upper() + said[1:] + ".", "", "```text"]
        lines += [_usage(command), "```", ""]
        lines += ["| argument | default | what it does |", "| --- | --- | --- |"]
        for action in _arguments(command):
            lines.append(f"| {_shown(action)} | {_default(action)} | {_cell(action.help or '')} |")
        lines.append("")
    return "\n".join(lines)
