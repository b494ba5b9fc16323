"""``gdnfuzz warm [--idle S] [--stop | --status] [--json]``: a server that keeps vLLM imported across runs.

``gdnfuzz warm`` starts the server (``fuzz.search.warm``) in the background and returns once it has
imported and instrumented vLLM's scheduling code; from then on ``gdnfuzz run`` forks its harness workers
from it, so their first input runs within a second of start instead of after vLLM's import. The server
exits after ``--idle`` seconds without a request, when a file of a module it imported changes (an edited
vLLM checkout: the next run starts cold, and ``gdnfuzz warm`` starts a fresh server), or with ``--stop``.
``--status`` and ``--stop`` say "no warm server is running" (``--json``: ``null``) when there is none.
Exit code 0, or 5 when the server could not start (its log's last line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fuzz.errors import ExitCode
from fuzz.plural import plural
from fuzz.search.settings import RunSettings
from fuzz.search.warm import DEFAULT_IDLE_S, start_server, status, stop_server


def cmd_warm(args: argparse.Namespace) -> int:
    if args.stop or args.status:
        answer = stop_server() if args.stop else status()
        _say(answer, args.json, "stopping: it exits once its workers have ended" if args.stop else "running")
        return ExitCode.CLEAN
    try:
        answer = start_server(args.idle, RunSettings().child_env())
    except RuntimeError as exc:
        print(f"gdnfuzz warm: {exc}", file=sys.stderr)
        return ExitCode.INFRASTRUCTURE
    _say(answer, args.json, "ready")
    return ExitCode.CLEAN


def _say(answer: dict[str, Any] | None, as_json: bool, state: str) -> None:
    if as_json:
        print(json.dumps(answer, sort_keys=True))
    elif answer is None:
        print("no warm server is running")
    else:
        print(f"warm server {answer['pid']} {state} at {answer['socket']} (vLLM imported and instrumented in "
              f"{answer['ready_s']:.1f}s; {plural(answer['workers'], 'worker')} alive; exits after {answer['idle_s']:.0f}s idle)")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("warm", help="keep vLLM imported in a background server that `gdnfuzz run` forks workers from",
                       description=__doc__.split("\n\n", 1)[1])
    p.add_argument("--idle", type=float, default=DEFAULT_IDLE_S, metavar="S",
                   help="seconds without a request after which the server exits")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--stop", action="store_true", help="stop the running server")
    which.add_argument("--status", action="store_true", help="say whether a server is running, and its state")
    p.add_argument("--json", action="store_true", help="print the server's state as one JSON object")
    p.set_defaults(func=cmd_warm)
