"""``gdnfuzz merge OUT IN...``: libFuzzer's corpus merge over the harness (what ``run -- -merge=1`` does); an input
that diverges is stored as found in ``--crashes`` and named. Exit 0 merged; 1 the merge failed (OUT unchanged but
for what libFuzzer had copied); 2 bad input."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fuzz.cli.options import add_fail_on_arg, add_policy_args, policies_of
from fuzz.errors import ExitCode, InputError
from fuzz.plural import plural
from fuzz.search.rerun import MergeRequest, merge_settings
from fuzz.search.settings import default_crashes
from fuzz.store.corpus_merge import run_libfuzzer_merge


def run_merge(request: MergeRequest, args: argparse.Namespace) -> int:
    """Carry out a merge request (from ``gdnfuzz merge`` or ``gdnfuzz run -- -merge=1``) and print its summary."""
    policies_of(args)
    env = merge_settings(args.candidate, args.reference, args.crashes, args.fail_on).child_env()
    before = _bundles(Path(args.crashes))
    files, features, edges = run_libfuzzer_merge(request.out, request.inputs, env, args.merge_timeout,
                                                 request.flags, request.mode)
    print(f"gdnfuzz merge ({request.mode}): {plural(files, 'new file')} with {plural(features, 'new feature')} "
          f"({plural(edges, 'new coverage edge')}) added to {request.out}")
    for bundle in sorted(_bundles(Path(args.crashes)) - before):
        print(f"gdnfuzz merge: an input diverged while merging; stored as found: {bundle}")
    return ExitCode.CLEAN


def _bundles(crashes: Path) -> set[Path]:
    return {p.parent for p in crashes.glob("*/verdict.json")}


def cmd_merge(args: argparse.Namespace) -> int:
    for d in [args.out, *args.inputs]:
        if not Path(d).is_dir():
            raise InputError(f"{d}: no such directory")
    mode = "-set_cover_merge=1" if args.set_cover else "-merge=1"
    return run_merge(MergeRequest(mode, Path(args.out), [Path(d) for d in args.inputs], ()), args)


def add_merge_args(p: argparse.ArgumentParser) -> None:
    """The settings a merge's harness runs under (shared with ``gdnfuzz run``'s -merge=1 path and prune)."""
    p.add_argument("--merge-timeout", type=float, default=600, help="seconds before a merge is abandoned")


def add_merge_harness_args(p: argparse.ArgumentParser) -> None:
    """A standalone merge's harness flags (``merge``, ``prune``): policies, ``--fail-on``, ``--crashes``, timeout."""
    add_policy_args(p)
    add_fail_on_arg(p)
    p.add_argument("--crashes", default=str(default_crashes()),
                   help="store for diverging inputs")
    add_merge_args(p)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("merge", help="merge corpus directories by coverage (libFuzzer -merge=1 over the harness)")
    p.add_argument("out", help="corpus directory to merge into (written)")
    p.add_argument("inputs", nargs="+", help="corpus directories to take new coverage from (read)")
    p.add_argument("--set-cover", action="store_true", help="libFuzzer's -set_cover_merge=1 (a smaller selection)")
    add_merge_harness_args(p)
    p.set_defaults(func=cmd_merge)
