"""``gdnfuzz confirm crashes/<signature>...``: re-run findings on the engine tier and record the outcome."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fuzz.errors import ExitCode
from fuzz.model.result import ConfirmState
from fuzz.tiers import CONFIRMING
from fuzz.triage.confirm import confirm_bundle


def cmd_confirm(args: argparse.Namespace) -> int:
    """Exit 1 when any bundle is confirmed, 0 otherwise; a bad bundle is an input error (exit 2)."""
    worst = ExitCode.CLEAN
    for bundle in args.bundles:
        state = confirm_bundle(Path(bundle), args.tier, None, args.candidate, args.reference)
        print(f"{bundle}: {state}")
        worst = max(worst, ExitCode.DIVERGED if state == ConfirmState.CONFIRMED else ExitCode.CLEAN)
    return worst


def add_parser(sub: Any) -> None:
    p = sub.add_parser("confirm", help="re-run findings on the engine tier and record confirmed / not / inconclusive")
    p.add_argument("bundles", nargs="+", help="crashes/<signature> directories")
    p.add_argument("--tier", default=CONFIRMING[0], choices=CONFIRMING,
                   help="the tier that decides")
    p.add_argument("--candidate", default=None,
                   help="the candidate policy (default: the bundle's, if it is built in)")
    p.add_argument("--reference", default=None,
                   help="the reference policy (default: the bundle's, if it is built in)")
    p.set_defaults(func=cmd_confirm)
