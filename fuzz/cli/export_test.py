"""``gdnfuzz export-test``: findings as pytest files needing only vLLM and pytest: one file or bundle as one test,
or with ``--suite`` the suite a vLLM PR adds under ``tests/v1/core/``. Exit 0 once written; 2 on bad input (or
nothing to export)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fuzz.cli.options import add_policy_option
from fuzz.errors import ExitCode, InputError
from fuzz.report.expectation import CHECKS
from fuzz.report.exported_test import HARNESS_MODULE
from fuzz.store.atomic import atomic_write
from fuzz.triage.export import export_suite, export_test


def cmd_export_test(args: argparse.Namespace) -> int:
    if args.suite:
        return _suite(args)
    if len(args.paths) != 1:
        raise InputError("export-test: one scenario file or bundle (several need --suite)")
    case, text = export_test(Path(args.paths[0]), args.candidate, args.reference, args.checks,
                             args.trust_named_policies)
    f = case.finding
    out = Path(args.out) if args.out else Path(f"test_{f.signature.replace('-', '_')}.py")
    atomic_write(out, text)
    print(f"wrote {out}: {f.signature} ({f.candidate} against {f.reference}). {case.expectation.what()} "
          f"{case.expectation.result()} Run it with: pytest {out}")
    return ExitCode.CLEAN


def _suite(args: argparse.Namespace) -> int:
    if args.checks != "installed":
        raise InputError("export-test --suite: a suite checks the installed vLLM's split (--checks installed)")
    if not args.out:
        raise InputError("export-test --suite: --out DIR is required (e.g. vLLM's tests/v1/core)")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: --out must be a directory for --suite")
    if not out.resolve().name.isidentifier():  # the test module imports the harness beside it, as a package
        raise InputError(f"{out}: --out for --suite must be a package name (a Python identifier, as vLLM's "
                         "tests/v1/core)")
    files, cases, skipped = export_suite(map(Path, args.paths), args.candidate, args.reference,
                                         args.trust_named_policies)
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "__init__.py").exists():  # the test module imports the harness beside it (.{HARNESS_MODULE})
        atomic_write(out / "__init__.py", "")
    for name, text in files.items():
        atomic_write(out / name, text)
    bugs = [c.name for c in cases if c.expectation.vllm_bug]
    print(f"wrote {', '.join(str(out / n) for n in files)}: {len(cases)} cases of the installed vLLM's split; "
          f"{len(cases) - len(bugs)} pass on it, {len(bugs)} are vLLM's own bugs (xfail strict: "
          f"{', '.join(bugs) or 'none'})")
    for line in skipped:
        print(f"left out: {line}")
    return ExitCode.CLEAN


def add_parser(sub: Any) -> None:
    p = sub.add_parser("export-test", help="write findings as pytest files that need only vLLM and pytest")
    p.add_argument("paths", nargs="+", metavar="FILE_OR_BUNDLE",
                   help="a bundle or scenario file (--suite: several, or directories)")
    p.add_argument("--suite", action="store_true",
                   help=f"write a suite: {HARNESS_MODULE}.py, a test module, JSON cases")
    p.add_argument("--checks", choices=CHECKS, default="installed",
                   help="the split the test checks")
    add_policy_option(p, "--candidate", default=None,
                      help="the split the finding was found with (default: from the file)")
    add_policy_option(p, "--reference", default=None, help="the reference split (default: the bundle's, else vllm)")
    p.add_argument("--out", default=None,
                   help="test file (default: test_<signature>.py); --suite: a directory")
    p.add_argument("--trust-named-policies", action="store_true",
                   help="run the non-built-in policies files name: only files you vouch for")
    p.set_defaults(func=cmd_export_test)
