"""Re-make the committed crash bundles with today's code (``fuzz.triage.remake``).

    .venv/bin/python scripts/remake_crashes.py crashes --out crashes.remade --max-time 300

Reads every bundle under the crashes directory (leaving it as it is), and writes today's bundles to
``--out``: judged again, minimized again for at most ``--max-time`` seconds each, one bundle per
signature, each with its report.md and test_regression.py. Prints what each old bundle became and its
sizes; replace the old bundles with the new ones by hand (``git rm -r crashes/<old>``, ``mv``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fuzz.triage.remake import remake  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("crashes", type=Path, help="the crashes directory whose bundles are re-made")
    parser.add_argument("--out", type=Path, required=True, help="where the new bundles go (must not exist)")
    parser.add_argument("--max-time", type=float, default=300.0, help="minimization seconds per bundle")
    args = parser.parse_args()
    if args.out.exists():
        parser.error(f"{args.out} exists: give a new directory")
    bundles = sorted(p for p in args.crashes.iterdir() if (p / "verdict.json").is_file())
    for r in remake(bundles, args.out, args.max_time):
        size = "-" if r.minimized is None else f"{r.minimized['requests']} requests, {r.minimized['prompt_tokens']} " \
            f"prompt tokens{' (cut short)' if r.timed_out else ''}"
        print(f"{r.old} -> {r.new}: {r.original['requests']} requests, {r.original['prompt_tokens']} prompt tokens "
              f"-> {size}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
