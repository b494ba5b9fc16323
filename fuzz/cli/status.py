"""``gdnfuzz status [--watch S] [--json]``: the campaign's latest stats per actor, with totals.

``--json``: one JSON object per refresh instead of the table, ``{"stats": PATH, "actors": {actor: its
latest row, as the stats file holds it}}`` (no screen clearing)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from typing import Any

from fuzz.errors import ExitCode, InputError
from fuzz.store.stats import (
    DEFAULT_STATS_PATH,
    STATS_ENV,
    StatsReader,
    StatsRow,
    default_stats_path,
    format_table,
    latest_by_actor,
)


def cmd_status(args: argparse.Namespace) -> int:
    """Exit 0; 2 on a missing (without ``--watch``) or corrupt stats file or a bad ``--watch``."""
    path = args.stats or default_stats_path()
    if args.watch is not None and not args.watch > 0:
        raise InputError(f"--watch: expected a positive number of seconds, got {args.watch}")
    reader = StatsReader(path)
    latest: dict[str, StatsRow] = {}
    clear = "\x1b[H\x1b[2J" if sys.stdout.isatty() and not args.json else ""
    while True:
        try:
            latest.update(latest_by_actor([*latest.values(), *reader.poll()]))
            text = format_table(latest, time.time()) if latest else f"no stats yet in {path}"
        except FileNotFoundError:
            if args.watch is None:
                raise InputError(f"{path}: no such file") from None
            text = f"waiting for {path}"
        if args.json:
            print(json.dumps({"stats": str(path), "actors": {a: asdict(r) for a, r in sorted(latest.items())}},
                             sort_keys=True), flush=True)
        elif args.watch is None:
            print(text)
        else:
            print(f"{clear}{time.strftime('%H:%M:%S')}  {path}\n{text}", flush=True)
        if args.watch is None:
            return ExitCode.CLEAN
        try:
            time.sleep(args.watch)
        except KeyboardInterrupt:
            return ExitCode.CLEAN


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("status", help="print the campaign's latest stats per actor, with totals")
    parser.add_argument("--stats", default=None, help=f"stats file (default ${STATS_ENV} or {DEFAULT_STATS_PATH})")
    parser.add_argument("--watch", type=float, default=None, metavar="S", help="refresh every S seconds until ^C")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per refresh (each actor's latest row) instead of the table")
    parser.set_defaults(func=cmd_status)
