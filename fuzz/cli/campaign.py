"""``gdnfuzz campaign``: continuous fuzzing on Ray (embedded locally, or on a cluster with ``--address auto``).

Fuzzer actors run the atheris harness, one crash store dedups and minimizes,
verifier actors confirm findings on the engine tier (see :mod:`workers.campaign.driver`).
Exit code 1 if the crash store holds any finding at the end, 0 otherwise, 2 on
bad input.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fuzz.cli.options import add_fail_on_arg, add_policy_args, add_store_args, positive_int
from fuzz.errors import InputError
from fuzz.model.policies import PolicyError, resolve_policy
from fuzz.oracle.verdict import exit_code_for
from fuzz.search.mutate import MAX_STEPS
from fuzz.search.settings import DEFAULT_MINIMIZE_SECONDS, RunSettings
from fuzz.store.stats import default_stats_path


def config_from_args(args: argparse.Namespace) -> Any:
    from workers.campaign.config import CampaignConfig

    run = RunSettings(candidate=args.candidate, reference=args.reference, fail_on=args.fail_on,
                      max_time=args.max_time, seed=args.seed, max_steps=args.max_steps,
                      minimize_seconds=args.minimize_time, libfuzzer=tuple(args.libfuzzer),
                      corpus=Path(args.corpus).resolve(), crashes=Path(args.crashes).resolve())
    return CampaignConfig(
        run=run, fuzzers=args.fuzzers, verifiers=args.verifiers, gpus_per_verifier=args.gpus_per_verifier,
        merge_every=args.merge_every, hang_timeout=args.hang_timeout, file_issues=args.file_issues,
        dry_run_issues=args.dry_run_issues, drain_time=args.drain_time, verify_fixed=args.verify_fixed)


def _check(args: argparse.Namespace) -> str | None:
    """The first bad argument as a one-line message, or None."""
    for flag, spec in (("--candidate", args.candidate), ("--reference", args.reference)):
        try:
            resolve_policy(spec)
        except PolicyError as exc:
            return f"{flag}: {exc}"
    for flag, value in (("--fuzzers", args.fuzzers), ("--max-time", args.max_time)):
        if value <= 0:
            return f"{flag}: expected a positive number, got {value}"
    if args.verifiers < 0 or args.gpus_per_verifier < 0:
        return "--verifiers/--gpus-per-verifier: expected a non-negative number"
    if args.file_issues is not None and args.file_issues.count("/") != 1:
        return f"--file-issues: expected owner/name, got {args.file_issues!r}"
    if args.dry_run_issues and args.file_issues is None:
        return "--dry-run-issues: needs --file-issues owner/name"
    return None


def cmd_campaign(args: argparse.Namespace) -> int:
    from workers.campaign.driver import Campaign, DriverSettings

    problem = _check(args)
    if problem:
        raise InputError(problem)
    config = config_from_args(args)
    dashboard = Path(args.dashboard) if args.dashboard else config.crashes / "dashboard.html"
    settings = DriverSettings(address=args.address, stats=Path(args.stats or default_stats_path()),
                              dashboard=dashboard)
    summary = Campaign(config, settings).run()
    print(f"campaign: {summary.seconds:.0f}s, {summary.execs} execs, fuzzer restarts {summary.restarts}")
    for seconds, sig, what in summary.events:
        print(f"{seconds:8.1f}s  {sig}  {what}")
    for sig, state in sorted(summary.signatures.items()):
        print(f"{sig}: {state or 'not verified'}  {config.crashes / sig}")
    print(f"dashboard: {dashboard}  stats: {settings.stats}")
    return exit_code_for(summary.signatures)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("campaign", help="continuous fuzzing on Ray: fuzzer actors, crash store, engine verifiers")
    p.add_argument("--address", default="local",
                   help="local (embedded Ray, the default), auto (an existing cluster) or ray://host:port")
    p.add_argument("--fuzzers", type=int, default=2, help="fuzzing actors, one CPU each (default 2)")
    p.add_argument("--verifiers", type=int, default=1, help="engine verifier actors, one GPU each where there is one (default 1)")
    p.add_argument("--gpus-per-verifier", type=float, default=1.0, help="used when the cluster has GPUs")
    p.add_argument("--max-time", type=float, default=300, help="seconds of fuzzing")
    add_policy_args(p)
    add_fail_on_arg(p)
    p.add_argument("--seed", type=int, default=1, help="fuzzer i uses libFuzzer -seed=SEED+i")
    add_store_args(p)
    p.add_argument("--stats", default=None, help="stats JSON-lines file (default $GDNFUZZ_STATS or stats.jsonl)")
    p.add_argument("--dashboard", default=None, help="HTML file (default CRASHES/dashboard.html)")
    p.add_argument("--file-issues", default=None, metavar="OWNER/NAME", help="file confirmed findings there")
    p.add_argument("--dry-run-issues", action="store_true", help="with --file-issues: write issue.md only")
    p.add_argument("--verify-fixed", action="store_true",
                   help="at the start, replay every stored finding against the installed vLLM (once per vLLM "
                        "version; with --file-issues, close fixed issues and reopen returning ones)")
    p.add_argument("--minimize-time", type=float, default=DEFAULT_MINIMIZE_SECONDS,
                   help=f"seconds to minimize each new signature (default {DEFAULT_MINIMIZE_SECONDS:g})")
    p.add_argument("--max-steps", type=positive_int, default=MAX_STEPS,
                   help=f"drop mutations that take more scheduler steps (as `gdnfuzz run`; default {MAX_STEPS})")
    p.add_argument("--merge-every", type=float, default=600.0, help="seconds between corpus merges (0: never)")
    p.add_argument("--hang-timeout", type=int, default=60, help="seconds one input may run before it is a hang")
    p.add_argument("--drain-time", type=float, default=240.0,
                   help="seconds to wait at the end for pending minimizations and verifications")
    p.add_argument("libfuzzer", nargs="*", help="libFuzzer flags, after --")
    p.set_defaults(func=cmd_campaign)
