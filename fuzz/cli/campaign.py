"""``gdnfuzz campaign``: continuous fuzzing on Ray (embedded, or a cluster with ``--address auto``); ``--resume``
continues from the store's ``campaign.json`` for the time left. Exit: every held finding's (``exit_code_for``); 2 bad
input; 5 when the store refused writes at the end or the Ray head was lost (one line saying what is saved)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from fuzz.cli.options import (
    add_fail_on_arg,
    add_policy_args,
    add_search_args,
    add_store_args,
    max_steps_of,
)
from fuzz.errors import FieldError, InputError
from fuzz.model.policies import PolicyError, named_in_data, resolve_policy
from fuzz.oracle.verdict import FailOn, exit_code_for
from fuzz.search.profiles import PROFILE_NAMES, RENAMED
from fuzz.search.settings import DEFAULT_MINIMIZE_SECONDS, RunSettings
from fuzz.store.stats import DEFAULT_STATS_PATH, STATS_ENV, default_stats_path

DEFAULT_MAX_TIME = 300.0
RESUME_FLAGS = ("address", "max_time", "drain_time")  # what --resume takes from the command line
NOT_ARGUMENTS = ("command", "func", "resume", "defaults", "verbose", "policy_options")  # not the campaign's settings
PATHS = ("corpus", "crashes", "stats", "dashboard")
RESUME_SEED_STEP = 100_000  # a resumed run's libFuzzer seeds differ from every earlier run's


def config_from_args(args: argparse.Namespace, earlier_runs: int = 0) -> Any:
    from workers.campaign.config import CampaignConfig

    run = RunSettings(candidate=args.candidate, reference=args.reference, fail_on=args.fail_on,
                      max_time=args.max_time, seed=args.seed + RESUME_SEED_STEP * earlier_runs,
                      max_steps=max_steps_of(args), profile=args.profile,
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
    for flag, value in (("--fuzzers", args.fuzzers), ("--max-time", args.max_time or DEFAULT_MAX_TIME)):
        if value <= 0:
            return f"{flag}: expected a positive number, got {value}"
    if args.verifiers < 0 or args.gpus_per_verifier < 0:
        return "--verifiers/--gpus-per-verifier: expected a non-negative number"
    if args.file_issues is not None and args.file_issues.count("/") != 1:
        return f"--file-issues: expected owner/name, got {args.file_issues!r}"
    if args.dry_run_issues and args.file_issues is None:
        return "--dry-run-issues: needs --file-issues owner/name"
    return None


def _resumed(args: argparse.Namespace) -> tuple[argparse.Namespace, Any, list[Any]]:
    """The saved campaign's arguments with this command's --address / --max-time / --drain-time, its record,
    and its stats rows so far. --max-time not given: the time the campaign had left."""
    from fuzz.store.stats import StatsReader
    from workers.campaign.resume import fuzzed_seconds, read_record, record_path

    crashes = Path(args.crashes).resolve()
    record = read_record(crashes)

    def changed(key: str, value: Any) -> bool:
        if value == args.defaults.get(key):
            return False
        if key in PATHS and value is not None:
            value = str(Path(value).resolve())
        return value != record.arguments.get(key)

    given = [k for k, v in vars(args).items() if k not in (*RESUME_FLAGS, *NOT_ARGUMENTS, "crashes") and changed(k, v)]
    if given:
        raise InputError(f"--{given[0].replace('_', '-')}: --resume continues the campaign with the settings in "
                         f"{record_path(crashes)}; give only --address, --max-time or --drain-time with it")
    saved = {**{k: v for k, v in vars(args).items() if k not in NOT_ARGUMENTS}, **record.arguments}
    for key in ("candidate", "reference"):  # a policy the record names runs only if given again, or built in
        if getattr(args, key) != saved.get(key):
            named_in_data(saved.get(key), f"{record_path(crashes)}: arguments.{key}", f"--resume --{key}")
    for key in ("address", "drain_time"):
        if getattr(args, key) != args.defaults.get(key):
            saved[key] = getattr(args, key)
    try:
        rows = StatsReader(saved["stats"]).poll()
    except FileNotFoundError:
        rows = []
    budget = float(record.arguments.get("max_time") or DEFAULT_MAX_TIME)
    saved["max_time"] = args.max_time if args.max_time is not None else budget - fuzzed_seconds(record, rows)
    if saved["max_time"] <= 0:
        raise InputError(f"{record_path(crashes)}: the campaign has run its {budget:g}s; give --max-time S to "
                         "fuzz S seconds more")
    saved["fail_on"] = FailOn(saved["fail_on"])
    saved["profile"] = RENAMED.get(saved["profile"], saved["profile"])  # what an older campaign ran, by today's name
    if saved["profile"] not in PROFILE_NAMES:
        raise FieldError("arguments.profile", f"{saved['profile']!r} is not a workload profile "
                         f"({', '.join(PROFILE_NAMES)})", record_path(crashes))
    return argparse.Namespace(**saved, func=args.func, resume=True, defaults=args.defaults), record, rows


def cmd_campaign(args: argparse.Namespace) -> int:
    from workers.campaign.driver import Campaign, DriverSettings
    from workers.campaign.resume import CampaignRecord, carried_execs, run_versions, write_record

    record, rows = None, []
    if args.resume:
        args, record, rows = _resumed(args)
    else:
        args.max_time = DEFAULT_MAX_TIME if args.max_time is None else args.max_time
        args.stats = args.stats or default_stats_path()
        for key in PATHS:  # absolute: a resumed campaign finds its stores from anywhere
            value = getattr(args, key)
            setattr(args, key, None if value is None else str(Path(value).resolve()))
    problem = _check(args)
    if problem:
        raise InputError(problem)
    config = config_from_args(args, len(record.runs) if record else 0)
    dashboard = Path(args.dashboard) if args.dashboard else config.crashes / "dashboard.html"
    arguments = {k: v for k, v in vars(args).items() if k not in NOT_ARGUMENTS}
    if record is not None:
        arguments["max_time"] = record.arguments.get("max_time", arguments["max_time"])
    record = CampaignRecord(arguments, ()) if record is None else record
    record = record.with_run(time.time(), run_versions())  # this run starts now, on these versions
    settings = DriverSettings(address=args.address, stats=Path(args.stats), dashboard=dashboard,
                              carried=carried_execs(rows), versions=record.versions)
    campaign = Campaign(config, settings)
    write_record(config.crashes, record)
    summary = campaign.run()
    print(f"campaign: {summary.seconds:.0f}s, {summary.execs} execs, fuzzer restarts {summary.restarts}")
    for seconds, sig, what in summary.events:
        print(f"{seconds:8.1f}s  {sig}  {what}")
    for sig, state in sorted(summary.signatures.items()):
        print(f"{sig}: {state or 'not verified'}  {config.crashes / sig}")
    for line in summary.faults:
        print(f"storage fault: {line}")
    for sig in summary.lost:
        print(f"{sig}: LOST: neither the store nor the fallback directory took it")
    print(f"dashboard: {dashboard}  stats: {settings.stats}")
    if summary.storage is not None:
        raise summary.storage
    return exit_code_for(summary.signatures)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("campaign", help="continuous fuzzing on Ray: fuzzer actors, crash store, engine verifiers")
    p.add_argument("--address", default="local",
                   help="Ray: local, auto or ray://host:port")
    p.add_argument("--fuzzers", type=int, default=2, help="fuzzing actors, one CPU each")
    p.add_argument("--verifiers", type=int, default=1, help="engine verifiers, a GPU each if any")
    p.add_argument("--gpus-per-verifier", type=float, default=1.0, help="used when the cluster has GPUs")
    p.add_argument("--max-time", type=float, default=None,
                   help=f"seconds to fuzz (default: {DEFAULT_MAX_TIME:g}; --resume: time left)")
    p.add_argument("--resume", action="store_true",
                   help="continue the --crashes campaign with its settings")
    add_policy_args(p)
    add_fail_on_arg(p)
    p.add_argument("--seed", type=int, default=1, help="fuzzer i uses libFuzzer -seed=SEED+i")
    add_store_args(p)
    p.add_argument("--stats", default=None, help=f"stats file (default: ${STATS_ENV} or {DEFAULT_STATS_PATH})")
    p.add_argument("--dashboard", default=None, help="HTML dashboard (default: CRASHES/dashboard.html)")
    p.add_argument("--file-issues", default=None, metavar="OWNER/NAME", help="file confirmed findings in this GitHub repository")
    p.add_argument("--dry-run-issues", action="store_true", help="with --file-issues: write issue.md only")
    p.add_argument("--verify-fixed", action="store_true",
                   help="first replay stored findings on the installed vLLM")
    p.add_argument("--minimize-time", type=float, default=DEFAULT_MINIMIZE_SECONDS,
                   help=f"seconds to minimize each new signature (default: {DEFAULT_MINIMIZE_SECONDS:g})")
    add_search_args(p)
    p.add_argument("--merge-every", type=float, default=600.0, help="seconds between merges (0: never)")
    p.add_argument("--hang-timeout", type=int, default=60, help="seconds per input: libFuzzer -timeout")
    p.add_argument("--drain-time", type=float, default=5.0,
                   help="seconds to minimize after --max-time")
    p.add_argument("libfuzzer", nargs="*", help="libFuzzer flags, after --")
    p.set_defaults(func=cmd_campaign)
    p.set_defaults(defaults={k: v for k, v in vars(p.parse_args([])).items() if k != "func"})
