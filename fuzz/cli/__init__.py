"""The ``gdnfuzz`` command line: one module per subcommand (:data:`SUBCOMMANDS`), and the one place where an error
becomes an exit code: 0 nothing diverged, 1 a divergence (or a saved finding), 2 bad input (one line on stderr
naming the file and field), 3 the tiers disagree (``replay --tier both``)."""

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
from fuzz.cli.options import DefaultsFormatter, Parser, check_policy_options
from fuzz.errors import exit_code_of
from fuzz.sandbox.scope import deciding
from fuzz.verbosity import set_verbosity


class JobsFormatter(DefaultsFormatter):
    """The top-level help: the epilog (:data:`JOBS`) keeps its lines."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return text if text.startswith("subcommands by job") else super()._fill_text(text, width, indent)


VERBOSE_HELP = "vLLM logs: -v INFO, -vv DEBUG (default: errors only)"  # here and in every child (fuzz.verbosity)
SUBCOMMANDS = (replay, compare, gen, policies, run, minimize, confirm, campaign, status, dashboard, file_issue,
               coverage, ci, merge, prune, fidelity, verify_fixed, bisect, export_test, schema, warm)


JOBS = """subcommands by job:
  fuzz a split (yours: --candidate FILE.py:ATTR)   run, replay, minimize, gen, policies, warm
  replay the corpus in CI (or the pytest plugin)   replay, coverage, merge, prune, fidelity
  check a pull request                             ci
  a campaign on a Ray cluster                      campaign, status, dashboard
  a finding, after it is found                     export-test, file-issue, confirm, verify-fixed, bisect
  costs, and the scenario format                   compare, schema
each subcommand's --help lists its flags."""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="gdnfuzz", description="Differential fuzzing of vLLM's Mamba/GDN align-mode chunk split.", epilog=JOBS,
        formatter_class=JobsFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}",
                        help="print gdnfuzz's version and exit")
    parser.add_argument("-v", "--verbose", action="count", default=0, help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    for command in sub.choices.values():  # `gdnfuzz replay -v` as well as `gdnfuzz -v replay`
        command.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=VERBOSE_HELP)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Shell completion (``eval "$(register-python-argcomplete gdnfuzz)"``): answers and exits only when
    # the shell asks (``_ARGCOMPLETE`` set); otherwise a no-op.
    import argcomplete

    argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)
    set_verbosity(args.verbose)
    with deciding():  # no candidate code in this process: it runs in sandbox children (fuzz.sandbox)
        return exit_code_of(lambda: _run(args), f"gdnfuzz {args.command}")


def _run(args: argparse.Namespace) -> int:
    check_policy_options(args)  # a mistyped policy is one line now, not after a candidate process's vLLM import
    return int(args.func(args))
