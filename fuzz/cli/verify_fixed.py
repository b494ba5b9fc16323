"""``gdnfuzz verify-fixed [PATH...]``: replay every finding against a new build; with ``--repo``, close fixed issues
and reopen returning ones. ``--json``: one object per bundle as done, then one with the totals (``summary``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from fuzz.cli.options import add_policy_option
from fuzz.errors import InputError
from fuzz.plural import plural
from fuzz.report.github import check_tracker
from fuzz.report.github_client import API_URL_ENV, DEFAULT_API_URL, TOKEN_ENV
from fuzz.store.bundle import VERIFY_STATES
from fuzz.tiers import TIERS
from fuzz.triage.candidate import MODES, at_revision, from_spec
from fuzz.triage.verify import Outcome, bundles_in, describe, exit_code, verify_store

DEFAULT_TRIES = 3


def cmd_verify_fixed(args: argparse.Namespace) -> int:
    """Exit 1 when a finding still reproduces (or is flaky); else 5 when a bundle's issue could not be brought
    in line (the API), 2 when a bundle could not be read, 0 otherwise (``fuzz.triage.verify.exit_code``)."""
    if (args.checkout is None) != (args.revision is None):
        raise InputError("--checkout and --revision go together (a git revision of a vLLM checkout)")
    if args.checkout is not None and args.candidate is not None:
        raise InputError("--candidate: not with --checkout/--revision (the revision is the candidate)")
    bundles = bundles_in([Path(p) for p in args.paths], with_issue=args.with_issue)
    if args.repo is not None:
        check_tracker(args.repo, args.api_url)  # a bad --repo, token or URL stops here, before any bundle
    where = at_revision(Path(args.checkout), args.revision, args.mode) if args.checkout is not None \
        else nullcontext(from_spec(args.candidate or "vllm"))
    with where as candidate:
        if not args.json:
            print(f"verify-fixed: {plural(len(bundles), 'bundle')} against {candidate.label}, "
                  f"{plural(args.tries, 'try', 'tries')} each")
        outcomes = verify_store(bundles, candidate, args.tries, args.tier, args.repo, args.api_url,
                                lambda outcome: _say(outcome, args.json), args.reference)
    counts = {s: sum(o.record is not None and o.record["status"] == s for o in outcomes) for s in VERIFY_STATES}
    unsynced = sum(o.issue_error is not None for o in outcomes)
    unverified = sum(o.record is None for o in outcomes)
    if args.json:
        print(json.dumps({"summary": {**counts, "not verified": unverified, "candidate": candidate.label,
                                      **({"issues not brought in line": unsynced} if args.repo else {})}},
                         sort_keys=True))
    else:
        print("verify-fixed: " + ", ".join(f"{n} {s}" for s, n in counts.items()) + f", {unverified} not verified"
              + (f", {plural(unsynced, 'issue')} not brought in line" if args.repo is not None else ""))
    return exit_code(outcomes)


def _say(outcome: Outcome, as_json: bool = False) -> None:
    """One line per bundle on stdout (the run's record: ``describe``, or with ``--json`` its JSON object); each
    thing that failed for it also on stderr, one line each, so a failure is seen where errors are looked for."""
    print(json.dumps({"bundle": str(outcome.bundle), "signature": outcome.signature, "record": outcome.record,
                      "already": outcome.already, "issue": outcome.issue,
                      "failures": [str(f) for f in outcome.failures]}, sort_keys=True, default=str)
          if as_json else describe(outcome), flush=True)
    for failure in outcome.failures:
        print(failure, file=sys.stderr)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("verify-fixed", help="replay every finding against a new vLLM: reproduces, fixed or flaky",
                       description="Each bundle is replayed TRIES times; 'fixed' only when no try reproduces and the "
                                   "canary is caught in the same configuration. Results go into each bundle, once per "
                                   f"candidate; with --repo the token is read from ${TOKEN_ENV} only.")
    p.add_argument("paths", nargs="*", default=[os.environ.get("GDNFUZZ_CRASHES", "crashes")],
                   help="crash bundles or crash stores (default $GDNFUZZ_CRASHES or crashes)")
    add_policy_option(p, "--candidate", default=None,
                      help="the build to check: any policy or checkout (default: vllm)")
    add_policy_option(p, "--reference", default=None,
                      help="the reference (default: each bundle's, if it is built in)")
    p.add_argument("--checkout", default=None, metavar="DIR", help="a vLLM git checkout (with --revision)")
    p.add_argument("--revision", default=None, metavar="REV",
                   help="the checkout's revision to check, read from git objects")
    p.add_argument("--mode", default="split", choices=MODES,
                   help="with --revision: the split alone or the whole branch")
    p.add_argument("--tries", type=int, default=DEFAULT_TRIES,
                   help=f"replays per bundle (default {DEFAULT_TRIES}); some but not all reproducing is flaky")
    p.add_argument("--tier", default=None, choices=TIERS,
                   help="tier to replay on (default: each bundle's own)")
    p.add_argument("--with-issue", action="store_true", help="only bundles with a filed issue (issue.json)")
    p.add_argument("--repo", default=None, metavar="OWNER/NAME",
                   help="close fixed findings' issues, reopen returning ones")
    p.add_argument("--api-url", default=None, help=f"API base URL (default ${API_URL_ENV} or {DEFAULT_API_URL})")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per bundle, then the totals, not the lines")
    p.set_defaults(func=cmd_verify_fixed)
