"""``gdnfuzz fidelity``: is the sim tier's runner mirror checked against the installed vLLM? Prints each mirrored
function whose source differs from ``workers/sim/mirror_fingerprints.json``; exit 0, or 2 with ``--strict``.
``--record`` rewrites the fingerprints: only after re-checking the mirror."""

from __future__ import annotations

import argparse
from typing import Any

from fuzz.errors import ExitCode


def cmd_fidelity(args: argparse.Namespace) -> int:
    from workers.sim import fidelity

    if args.record:
        print(f"gdnfuzz fidelity: recorded {len(fidelity.MIRRORED)} fingerprints in {fidelity.record()}")
        return ExitCode.CLEAN
    found = fidelity.check_mirror_fidelity(strict=args.strict)
    for mismatch in found:
        print(f"differs: {mismatch}")
    if not found:
        print(f"gdnfuzz fidelity: all {len(fidelity.MIRRORED)} mirrored vLLM functions match the checked source")
    return ExitCode.CLEAN


def add_parser(sub: Any) -> None:
    p = sub.add_parser("fidelity", help="check the sim tier's runner mirror against the installed vLLM's source")
    p.add_argument("--strict", action="store_true", help="exit 2 on a changed mirrored function (else warn)")
    p.add_argument("--record", action="store_true",
                   help="record the installed vLLM's fingerprints as checked (after re-checking the mirror)")
    p.set_defaults(func=cmd_fidelity)
