"""Write the command-line reference (Markdown) from the ``llmco2`` argparse parser.

The docs build calls :func:`cli_reference_markdown` (``docs/hooks.py``), so the page always shows
the parser as it is; nothing in it is written by hand. Run it alone to print the page:
``python docs/gen_cli_reference.py > cli.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 100


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each sub-command, in the order the parser lists them."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) in seen:  # an alias of a command already listed
                    continue
                seen.add(id(sub))
                out.append((name, helps.get(name, ""), sub))
    return out


def _options_table(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._SubParsersAction, argparse._HelpAction)) or action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            metavar = "" if action.nargs == 0 else " " + formatter._format_args(action, formatter._get_default_metavar_for_optional(action))
            name = ", ".join(f"`{opt}{metavar}`" for opt in action.option_strings)
        else:
            name = f"`{formatter._format_args(action, formatter._get_default_metavar_for_positional(action))}`"
        help_text = formatter._expand_help(action) if action.help else ""
        facts = []
        if action.required and action.option_strings:
            facts.append("required")
        if action.choices is not None and not isinstance(action.choices, dict):
            facts.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
        if action.default not in (None, False, argparse.SUPPRESS) and action.nargs != 0 and "default" not in help_text:
            facts.append(f"default `{action.default}`")
        detail = help_text + (" (" + "; ".join(facts) + ")" if facts else "")
        rows.append(f"| {_escape(name)} | {_escape(detail.strip())} |")
    if not rows:
        return []
    return ["| option | what it does |", "|---|---|", *rows, ""]


def _section(parser: argparse.ArgumentParser, path: list[str], help_line: str, level: int) -> list[str]:
    lines = [f"{'#' * level} `{' '.join(path)}`", ""]
    description = parser.description or help_line
    if description:
        lines += [_escape(description.strip()), ""]
    lines += ["```text", parser.format_usage().strip(), "```", ""]
    subs = _subcommands(parser)
    if subs:
        lines += ["| command | what it does |", "|---|---|"]
        lines += [f"| [`{' '.join([*path, name])}`](#{'-'.join([*path, name])}) | {_escape(text)} |" for name, text, _ in subs]
        lines.append("")
    lines += _options_table(parser)
    if parser.epilog:
        lines += [_escape(parser.epilog.strip()), ""]
    for name, text, sub in subs:
        lines += _section(sub, [*path, name], text, min(level + 1, 4))
    return lines


def cli_reference_markdown() -> str:
    """The whole reference page, generated from ``llmco2.cli.build_parser``."""
    os.environ["COLUMNS"] = str(WIDTH)  # argparse wraps usage lines at the terminal width
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from llmco2.cli import build_parser

    parser, _ = build_parser()
    head = [
        "# Command-line reference",
        "",
        "Generated from the `llmco2` argument parser when the site is built (`docs/gen_cli_reference.py`);",
        "`llmco2 COMMAND --help` prints the same. Bad input exits with code 2 and one line on stderr.",
        "",
    ]
    body = _section(parser, ["llmco2"], parser.description or "", 2)
    return "\n".join(head + body) + "\n"


if __name__ == "__main__":
    sys.stdout.write(cli_reference_markdown())
