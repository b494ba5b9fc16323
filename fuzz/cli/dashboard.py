"""``gdnfuzz dashboard --out FILE.html``: the campaign's static HTML page (plots and findings), with the versions
in the store's ``campaign.json`` (without one, the page says they were not recorded)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fuzz.errors import ExitCode
from fuzz.report.dashboard import write_dashboard
from fuzz.search.settings import default_crashes
from fuzz.store.stats import default_stats_path
from workers.campaign.resume import read_record, record_path


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Exit 0; 2 on a corrupt stats file or campaign record, or a ``--stats`` file that does not exist."""
    stats = args.stats or (default_stats_path() if Path(default_stats_path()).exists() else None)
    crashes = Path(args.crashes)
    versions = read_record(crashes).versions if record_path(crashes).exists() else ()
    print(f"wrote {write_dashboard(stats, crashes, args.out, args.compare, versions)}")
    return ExitCode.CLEAN


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("dashboard", help="write a static HTML page with the campaign's plots and findings")
    parser.add_argument(
        "--stats", default=None, help="stats file (default $GDNFUZZ_STATS or stats.jsonl, skipped while absent)"
    )
    parser.add_argument("--crashes", default=str(default_crashes()),
                        help="crash store ($GDNFUZZ_CRASHES)")
    parser.add_argument("--out", required=True, help="the HTML file to write")
    parser.add_argument("--compare", default=None, metavar="FILE",
                        help="a `gdnfuzz compare --json` report: adds its A/B cost plots")
    parser.set_defaults(func=cmd_dashboard)
