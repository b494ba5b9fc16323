"""``gdnfuzz export-test FILE_OR_BUNDLE --out test_x.py``: a finding as a pytest file needing only vLLM and pytest.

The file drives vLLM's real Scheduler and KV-cache manager through the finding's scenario, mirrors the
model runner's Mamba state writes over exact states, and asserts what the finding broke; it fails while
the bug is there and passes once it is fixed. Exit 0 once written; 2 on bad input (or nothing to export).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fuzz.cli.options import add_policy_option
from fuzz.errors import ExitCode
from fuzz.store.atomic import atomic_write
from fuzz.triage.export import export_test


def cmd_export_test(args: argparse.Namespace) -> int:
    finding, text = export_test(Path(args.path), args.candidate, args.reference)
    out = Path(args.out) if args.out else Path(f"test_{finding.signature.replace('-', '_')}.py")
    atomic_write(out, text)
    print(f"wrote {out}: {finding.signature} ({finding.candidate} against {finding.reference}); run it with pytest {out}")
    return ExitCode.CLEAN


def add_parser(sub: Any) -> None:
    p = sub.add_parser("export-test", help="write a finding as a self-contained pytest file (needs only vLLM and pytest)")
    p.add_argument("path", help="a crashes/<signature> bundle or a scenario file")
    add_policy_option(p, "--candidate", default=None,
                      help="the split under test (default: the finding's own: the bundle's; for a file, the policy its "
                           "expect says diverges or regresses there, else vllm)")
    add_policy_option(p, "--reference", default=None, help="the reference split (default: the bundle's, else vllm)")
    p.add_argument("--out", default=None, help="the test file to write (default test_<signature>.py)")
    p.set_defaults(func=cmd_export_test)
