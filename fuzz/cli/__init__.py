"""The ``gdnfuzz`` command line: one module per subcommand, listed in :data:`SUBCOMMANDS`.

Exit codes (``fuzz.errors.ExitCode``), for every subcommand: 0 nothing diverged, 1 a divergence (or
a saved finding), 2 bad input (one line on stderr naming the file and field), 3 the tiers disagree
(``replay --tier both``). This is the one place where an error becomes an exit code.
"""

from __future__ import annotations

import argparse

from fuzz.cli import campaign, confirm, dashboard, file_issue, gen, minimize, policies, replay, run, status
from fuzz.errors import exit_code_of

SUBCOMMANDS = (replay, gen, policies, run, minimize, confirm, campaign, status, dashboard, file_issue)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gdnfuzz", description="Differential fuzzing of vLLM's Mamba/GDN align-mode chunk split.")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return exit_code_of(lambda: args.func(args), f"gdnfuzz {args.command}")
