"""``gdnfuzz prune``: shrink ``CORPUS/queue`` to libFuzzer's set-cover selection over the seeds and regressions, with
no loss of coverage; an input over ``-max_len`` is named and left. Exit 0 once pruned; 5 if the merge fails (the
queue unchanged)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from fuzz.cli.merge import add_merge_harness_args
from fuzz.cli.options import policies_of
from fuzz.errors import ExitCode, InputError
from fuzz.plural import plural
from fuzz.search.rerun import merge_settings
from fuzz.store.corpus_merge import MAX_INPUT_BYTES, merge_corpus


def cmd_prune(args: argparse.Namespace) -> int:
    policies_of(args)
    settings = replace(merge_settings(args.candidate, args.reference, args.crashes, args.fail_on), corpus=Path(args.corpus))
    if not settings.queue.is_dir():
        raise InputError(f"{settings.queue}: no such directory (nothing to prune)")
    report = merge_corpus(settings.queue, list(settings.committed), settings.child_env(), timeout=args.merge_timeout)
    for path in report.skipped:
        print(f"gdnfuzz prune: skipped {path}: larger than libFuzzer's -max_len ({MAX_INPUT_BYTES} bytes); left as it is",
              file=sys.stderr)
    print(f"gdnfuzz prune: {plural(report.candidates, 'input')} -> {report.kept} kept, {report.removed} removed "
          f"({plural(report.features, 'feature')}, {plural(report.edges, 'edge')} over the seeds and regressions) "
          f"in {report.seconds:.1f}s" + (f"; {plural(len(report.skipped), 'oversized input')} skipped"
                                          if report.skipped else ""))
    return ExitCode.CLEAN


def add_parser(sub: Any) -> None:
    p = sub.add_parser("prune", help="shrink CORPUS/queue to a set-cover of its coverage (seeds and regressions kept)")
    p.add_argument("--corpus", default="corpus", help="corpus root whose queue/ is pruned (default corpus)")
    add_merge_harness_args(p)
    p.set_defaults(func=cmd_prune)
