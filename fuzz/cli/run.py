"""``gdnfuzz run``: coverage-guided fuzzing with atheris, in worker subprocesses (``fuzz.search.supervisor``).

Exit 1 if any finding was saved or any worker crashed. libFuzzer flags pass
through after ``--`` (``gdnfuzz run -- -max_len=20000``).
"""

from __future__ import annotations

import argparse
from typing import Any

from fuzz.cli.options import add_policy_args, add_store_args, policies_of
from fuzz.search.libfuzzer import Progress
from fuzz.search.supervisor import run_workers


def cmd_run(args: argparse.Namespace) -> int:
    policies_of(args)  # a bad policy is an input error before any worker starts
    progress = Progress()
    code = run_workers(args, progress)
    for seconds, sig, bundle in sorted(progress.findings)[:50]:
        print(f"{seconds:8.1f}s  {sig}  {bundle}")
    for sig, seconds in sorted(progress.detected.items(), key=lambda kv: kv[1]):
        print(f"detected {sig} after {seconds:.1f}s")
    return code


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="coverage-guided fuzzing of a candidate split against a reference (atheris)")
    p.add_argument("--target", default="split", choices=("split", "kernels"),
                   help="split: candidate vs reference on the sim tier; kernels: GDN kernel conformance "
                        "(a conformance failure is a libFuzzer crash: the worker stops and keeps the input)")
    add_policy_args(p)
    p.add_argument("--max-time", type=int, default=300, help="seconds (0: no limit)")
    p.add_argument("--runs", type=int, default=0, help="stop each worker after N inputs (0: no limit)")
    p.add_argument("--seed", type=int, default=1)
    add_store_args(p)
    p.add_argument("-j", "--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--minimize-time", type=float, default=60.0, help="seconds to minimize each new signature")
    p.add_argument("--no-regressions", action="store_true", help="do not add findings to corpus/regressions")
    p.add_argument("libfuzzer", nargs="*", help="libFuzzer flags, after --")
    p.set_defaults(func=cmd_run)
