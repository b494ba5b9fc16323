"""Every flag and positional of every subcommand says what it is for (``gdnfuzz X --help``)."""

from __future__ import annotations

import argparse
import os
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
