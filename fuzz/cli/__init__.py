"""The ``gdnfuzz`` command line: one module per subcommand, listed in :data:`SUBCOMMANDS`.

Exit codes (``fuzz.errors.ExitCode``), for every subcommand: 0 nothing diverged, 1 a divergence (or
a saved finding), 2 bad input (one line on stderr naming the file and field), 3 the tiers disagree
(``replay --tier both``). This is the one place where an error becomes an exit code.
"""

from __future__ import annotations

import argparse

from fuzz import package_version
from fuzz.cli import (
    bisect,
    campaign,
    ci,
    compare,
    confirm,
    coverage,
    dashboard,
    export_test,
    fidelity,
    file_issue,
    gen,
    merge,
    minimize,
    policies,
    prune,
    replay,
    run,
    schema,
    status,
    verify_fixed,
    warm,
)
from fuzz.cli.options import Parser
from fuzz.errors import exit_code_of
from fuzz.sandbox.scope import deciding

SUBCOMMANDS = (replay, compare, gen, policies, run, minimize, confirm, campaign, status, dashboard, file_issue,
               coverage, ci, merge, prune, fidelity, verify_fixed, bisect, export_test, schema, warm)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="gdnfuzz", description="Differential fuzzing of vLLM's Mamba/GDN align-mode chunk split.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}",
                        help="print gdnfuzz's version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Shell completion (``eval "$(register-python-argcomplete gdnfuzz)"``): answers and exits only when
    # the shell asks (``_ARGCOMPLETE`` set); otherwise a no-op.
    import argcomplete

    argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    with deciding():  # no candidate code in this process: it runs in sandbox children (fuzz.sandbox)
        return exit_code_of(lambda: args.func(args), f"gdnfuzz {args.command}")
