"""Every flag and positional of every subcommand says what it is for (``gdnfuzz X --help``)."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from fuzz.cli import SUBCOMMANDS, build_parser, main


def _walk(parser: argparse.ArgumentParser, path: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _walk(child, f"{path} {name}")
        else:
            yield path, action


def test_every_action_of_every_subcommand_has_help():
    missing = [f"{path}: {'/'.join(a.option_strings) or a.dest}" for path, a in _walk(build_parser(), "gdnfuzz")
               if not (a.help and a.help.strip()) and a.help is not argparse.SUPPRESS]
    assert missing == []


def test_every_subcommand_is_reachable():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert len(sub.choices) == len(SUBCOMMANDS)


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    assert capsys.readouterr().out.startswith("gdnfuzz ")


def test_python_dash_m_gdnfuzz_is_the_command(tmp_path):
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "gdnfuzz", "--version"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.split()[0]) == (0, "gdnfuzz")


def test_every_option_with_a_default_shows_it_in_help():
    from fuzz.cli.options import DefaultsFormatter

    formatter = DefaultsFormatter("gdnfuzz")
    silent = [f"{path}: {'/'.join(a.option_strings)}" for path, a in _walk(build_parser(), "gdnfuzz")
              if a.option_strings and a.help is not argparse.SUPPRESS and a.default is not argparse.SUPPRESS
              and a.default is not None and a.default is not False and a.default != []
              and "default" not in (formatter._get_help_string(a) or "")]
    assert silent == []
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert all(p.formatter_class is DefaultsFormatter for p in sub.choices.values())  # what --help uses


HELP_WIDTH = 100


def _parsers():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [("gdnfuzz", parser)] + [(f"gdnfuzz {name}", child) for name, child in sub.choices.items()]


def _action_lines(parser: argparse.ArgumentParser) -> dict[str, re.Pattern]:
    """Each action's one line, as a pattern: its invocation, then its whole help (``(default: X)`` included)."""
    formatter = parser._get_formatter()
    actions = []
    for action in parser._actions:
        if action.help is argparse.SUPPRESS:
            continue
        actions.append(action)
        if isinstance(action, argparse._SubParsersAction):
            actions.extend(action._get_subactions())  # the subcommands, one line each
    lines = {}
    for action in actions:
        invocation = formatter._format_action_invocation(action)
        text = formatter._expand_help(action) if action.help else ""
        lines[invocation] = re.compile(r" +" + re.escape(invocation) + (r" {2,}" + re.escape(text) if text else ""))
    return lines


def _section_lines(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """The lines of the help's argument sections (positional arguments, options, any other group)."""
    titles = {f"{group.title}:" for group in parser._action_groups if group._group_actions}
    found, inside = [], False
    for line in text.splitlines():
        if not line.strip():
            inside = False
        elif inside:
            found.append(line)
        elif line in titles:
            inside = True
    return found


def test_every_flag_of_every_help_is_one_line(monkeypatch):
    """Each flag (and each subcommand of the top-level list) is one line of --help, its whole help beside its
    invocation, at most 100 columns wide: no help wrapped, none put on the line after a long invocation."""
    monkeypatch.setenv("COLUMNS", str(HELP_WIDTH))
    bad = []
    for path, parser in _parsers():
        expected = _action_lines(parser)
        lines = _section_lines(parser, parser.format_help())
        assert lines, path
        seen = set()
        for line in lines:
            matched = [inv for inv, pattern in expected.items() if pattern.fullmatch(line)]
            if not matched or len(line) > HELP_WIDTH:
                bad.append(f"{path}: {line.strip()[:60]!r} ({len(line)} columns)")
            seen.update(matched)
        bad.extend(f"{path}: {inv}: not on one line" for inv in expected if inv not in seen)
    assert bad == []
