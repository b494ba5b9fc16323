"""``gdnfuzz bisect BUNDLE --checkout DIR --good REV --bad REV``: the first vLLM revision where a finding reproduces
(``--fixed``: stops reproducing), recorded in the bundle; ``--json``: one object on stdout, the log on stderr."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fuzz.errors import ExitCode
from fuzz.report.lifecycle import record_range
from fuzz.store.bundle import load_bundle
from fuzz.triage.bisect import bisect
from fuzz.triage.candidate import MODES


def cmd_bisect(args: argparse.Namespace) -> int:
    """Exit 0 once the range is recorded; 2 on bad input (a bundle, a revision, an end that is not as said)."""
    bundle = load_bundle(args.bundle)
    log = sys.stderr if args.json else sys.stdout
    result = bisect(bundle, Path(args.checkout), args.good, args.bad, args.fixed, args.mode,
                    lambda line: print(f"bisect: {line}", file=log, flush=True), args.reference)
    field = "fixed_in" if args.fixed else "regression_range"
    record_range(bundle.path, field, result.to_record())
    print(f"recorded in {bundle.path / 'verdict.json'}", file=log)
    if args.json:
        print(json.dumps({"bundle": str(bundle.path), "field": field, "record": result.to_record(),
                          "log": result.log}, sort_keys=True))
    return ExitCode.CLEAN


def add_parser(sub: Any) -> None:
    p = sub.add_parser("bisect", help="find the vLLM revision that broke a finding (or, with --fixed, fixed it)",
                       description="Binary search over `git rev-list --first-parent GOOD..BAD` (BAD..GOOD with "
                                   "--fixed); each revision is read from git objects, revisions that cannot be loaded "
                                   "against the installed vLLM are skipped and named.")
    p.add_argument("bundle", help="crash bundle directory, crashes/<signature>")
    p.add_argument("--checkout", required=True, metavar="DIR", help="a vLLM git checkout (only read)")
    p.add_argument("--good", required=True, metavar="REV", help="a revision where the finding does not reproduce")
    p.add_argument("--bad", required=True, metavar="REV", help="a revision where it reproduces")
    p.add_argument("--fixed", action="store_true",
                   help="find the first fixed revision (BAD is then the older)")
    p.add_argument("--mode", default="split", choices=MODES,
                   help="each revision's split alone, or its whole scheduling code")
    p.add_argument("--reference", default=None,
                   help="the reference policy (default: the bundle's, if it is built in)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object (the record, the log) on stdout; the log on stderr")
    p.set_defaults(func=cmd_bisect)
