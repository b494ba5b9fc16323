"""``gdnfuzz status [--watch S] [--json]``: the campaign's latest stats per actor, with totals: plain lines in a log
or pipe, a rich table on a terminal; ``--json``: ``{"stats": PATH, "actors": {actor: latest row}}`` per refresh."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict
from typing import Any

from fuzz.cli.terminal import terminal
from fuzz.errors import ExitCode, InputError
from fuzz.report.status_table import format_table, status_renderable
from fuzz.store.stats import (
    DEFAULT_STATS_PATH,
    STATS_ENV,
    StatsReader,
    StatsRow,
    default_stats_path,
    latest_by_actor,
)

Show = Callable[[dict[str, StatsRow], str | None], None]  # the latest rows, or what to say while there are none


def _display(args: argparse.Namespace, path: str) -> tuple[AbstractContextManager[Any], Show]:
    """How each refresh is shown, and the live display it is drawn in (a terminal's ``--watch``)."""
    if args.json:
        def show_json(latest: dict[str, StatsRow], _: str | None) -> None:
            print(json.dumps({"stats": str(path), "actors": {a: asdict(r) for a, r in sorted(latest.items())}},
                             sort_keys=True), flush=True)

        return nullcontext(), show_json
    watching = args.watch is not None
    console = terminal()
    if console is None:
        def show_plain(latest: dict[str, StatsRow], waiting: str | None) -> None:
            text = waiting or format_table(latest, time.time())
            print(f"{time.strftime('%H:%M:%S')}  {path}\n{text}" if watching else text, flush=True)

        return nullcontext(), show_plain
    from rich.live import Live
    from rich.text import Text

    live = Live(console=console, auto_refresh=False) if watching else None

    def show_rich(latest: dict[str, StatsRow], waiting: str | None) -> None:
        title = f"{time.strftime('%H:%M:%S')}  {path}" if watching else None
        shown = Text(f"{title}\n{waiting}" if title else waiting) if waiting else \
            status_renderable(latest, time.time(), title)
        if live is None:
            console.print(shown)
        else:
            live.update(shown, refresh=True)

    return live or nullcontext(), show_rich


def cmd_status(args: argparse.Namespace) -> int:
    """Exit 0; 2 on a missing (without ``--watch``) or corrupt stats file or a bad ``--watch``."""
    path = args.stats or default_stats_path()
    if args.watch is not None and not args.watch > 0:
        raise InputError(f"--watch: expected a positive number of seconds, got {args.watch}")
    reader = StatsReader(path)
    latest: dict[str, StatsRow] = {}
    display, show = _display(args, path)
    with display:
        while True:
            try:
                latest.update(latest_by_actor([*latest.values(), *reader.poll()]))
                waiting = None if latest else f"no stats yet in {path}"
            except FileNotFoundError:
                if args.watch is None:
                    raise InputError(f"{path}: no such file: `gdnfuzz status` shows a campaign's stats (`gdnfuzz "
                                     "campaign` writes them); `gdnfuzz run` prints its own status lines and summary") from None
                waiting = f"waiting for {path}"
            show(latest, waiting)
            if args.watch is None:
                return ExitCode.CLEAN
            try:
                time.sleep(args.watch)
            except KeyboardInterrupt:
                return ExitCode.CLEAN


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("status", help="print a campaign's latest stats per actor, with totals (`run` "
                                                  "prints its own)")
    parser.add_argument("--stats", default=None, help=f"stats file (default ${STATS_ENV} or {DEFAULT_STATS_PATH})")
    parser.add_argument("--watch", type=float, default=None, metavar="S", help="refresh every S seconds until ^C")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per refresh (each actor's latest row) instead of the table")
    parser.set_defaults(func=cmd_status)
