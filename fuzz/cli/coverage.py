"""``gdnfuzz coverage CORPUS_DIR...``: replays a corpus on the sim tier under line and branch coverage of
``vllm/v1/core``: per-function figures for the split and MambaManager, HTML to ``--html``. Exit 0; 2 bad input."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fuzz.cli.options import add_policy_option
from fuzz.errors import ExitCode
from fuzz.model.policies import resolve_policy
from fuzz.search.settings import OUTPUT_DIR
from fuzz.triage.coverage import corpus_files, format_report, measure


def cmd_coverage(args: argparse.Namespace) -> int:
    policy = resolve_policy(args.policy)
    files = corpus_files(args.corpus_dirs)
    report = measure(files, policy, html_dir=Path(args.html))
    print(format_report(report))
    print(f"HTML report: {args.html}/index.html")
    return ExitCode.CLEAN


def add_parser(sub: Any) -> None:
    p = sub.add_parser("coverage", help="replay a corpus under coverage of vLLM's split and MambaManager")
    p.add_argument("corpus_dirs", nargs="+", metavar="CORPUS_DIR", help="corpus directories or files")
    add_policy_option(p, "--policy", default="vllm", help="the split to run (default vllm, the installed split)")
    p.add_argument("--html", default=str(OUTPUT_DIR / "coverage-html"),
                   help=f"directory for the HTML report (default {OUTPUT_DIR / 'coverage-html'})")
    p.set_defaults(func=cmd_coverage)
