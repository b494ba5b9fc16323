"""``gdnfuzz file-issue BUNDLE --repo owner/name [--dry-run]``: render a bundle's issue and file it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fuzz.errors import ExitCode
from fuzz.report.github import LABEL, file_issue
from fuzz.report.github_client import API_URL_ENV, DEFAULT_API_URL, MAX_WAIT_ENV, TOKEN_ENV


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "file-issue",
        help="render a crash bundle as a GitHub issue and file it (or comment on the open one)",
        description=f"The token is read from ${TOKEN_ENV} only. Issues are labelled {LABEL!r}. A request answered "
                    "with an error is tried again only after checking what it left (never two issues or comments), "
                    f"and one call waits at most ${MAX_WAIT_ENV} seconds (default 60) for the server.",
    )
    parser.add_argument("bundle", help="crash bundle directory, crashes/<signature>")
    parser.add_argument("--repo", required=True, help="owner/name of the GitHub repository")
    parser.add_argument(
        "--dry-run", action="store_true", help="write issue.md into the bundle and print it; no request"
    )
    parser.add_argument("--api-url", default=None, help=f"API base URL (default ${API_URL_ENV} or {DEFAULT_API_URL})")
    parser.set_defaults(func=cmd_file_issue)


def cmd_file_issue(args: argparse.Namespace) -> int:
    """Exit 0 when filed (or rendered), 2 on a bad bundle or usage, 5 when the API failed (infrastructure)."""
    result = file_issue(args.bundle, args.repo, args.dry_run, args.api_url)
    if result.action == "dry-run":
        print(f"# {result.title}\n\n{result.body}")
        print(f"(dry run: written to {result.written[0]}; nothing sent)", file=sys.stderr)
    else:
        print(f"{result.action} {args.repo}#{result.number}: {result.url}")
    return ExitCode.CLEAN
