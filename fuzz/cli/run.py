"""``gdnfuzz run``: coverage-guided fuzzing with atheris, in worker subprocesses (``fuzz.search.supervisor``).

One line per new signature as it is found, repeats counted in the status line, and a summary at the end
(``--json``: one JSON object instead): time, executions, coverage, corpus, seed, the first verdict, and
every signature with where it is stored and whether it was minimized. Exit 1 for a correctness finding
or a crashed worker, 4 for efficiency findings only (``--fail-on efficiency|any``), 0 for none. ^C ends
the run as its ``--max-time`` does (workers stopped, every finding stored, unminimized if its
minimization had not finished, the summary printed); with nothing found it exits 130. libFuzzer flags
pass through after ``--`` (``gdnfuzz run -- -max_len=20000``).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from fuzz.cli.merge import add_merge_args, run_merge
from fuzz.cli.options import (
    add_fail_on_arg,
    add_policy_args,
    add_search_args,
    add_store_args,
    max_steps_of,
    policies_of,
)
from fuzz.errors import ExitCode, InputError
from fuzz.plural import plural
from fuzz.sandbox.containment import adopting_orphans
from fuzz.sandbox.scope import stop_children
from fuzz.search.libfuzzer import Progress
from fuzz.search.rerun import merge_request
from fuzz.search.settings import DEFAULT_MINIMIZE_SECONDS, TARGETS, RunSettings
from fuzz.search.supervisor import run_workers
from fuzz.store.bundle import load_verdict


def run_settings(args: argparse.Namespace) -> RunSettings:
    """The run's settings, from its command line."""
    return RunSettings(candidate=args.candidate, reference=args.reference, fail_on=args.fail_on, target=args.target,
                       max_time=args.max_time, runs=args.runs, seed=args.seed, jobs=args.jobs,
                       max_steps=max_steps_of(args), profile=args.profile,
                       minimize_seconds=args.minimize_time,
                       libfuzzer=tuple(args.libfuzzer), corpus=Path(args.corpus), crashes=Path(args.crashes),
                       write_regressions=args.add_regressions)


def cmd_run(args: argparse.Namespace) -> int:
    policies_of(args)  # a bad policy is an input error before any worker starts
    merge = merge_request(args.libfuzzer)  # flags that re-run the target: a merge, or refused (exit 2)
    if merge is not None:
        return run_merge(merge, args)
    progress = Progress()
    with adopting_orphans():  # a worker's sandbox keepers, once its fork server is gone, wait here to be seen to end
        code = run_workers(run_settings(args), progress)
        stop_children()  # everything a candidate started is gone before the summary is written
    record = run_record(progress, code, args.seed)
    print(json.dumps(record, sort_keys=True) if args.json else run_summary(record))
    if progress.interrupted and not progress.signatures():
        return ExitCode.INTERRUPTED  # nothing found, and the budget not spent: not a clean run
    return code


def run_record(progress: Progress, code: int, seed: int) -> dict[str, Any]:
    """What the run did and found (``--json`` prints this): its time, executions, coverage and corpus, the
    seed, when the first input started and the first verdict came, where start-up went, whether ^C ended
    it; every signature once, in order of first detection: when, how often, where it is stored (None if
    it is not) and whether minimized (``state``: ``minimized``, or ``unminimized``: stored as found);
    the exit code and the worker crashes; under the mixture, each profile's figures (``profiles``)."""
    counts = Counter(sig for _, sig, _ in progress.findings)
    totals = progress.totals()
    elapsed = time.monotonic() - progress.started  # the whole run: start-up, fuzzing and storing what it found
    signatures = []
    for sig, seconds in sorted(progress.detected.items(), key=lambda kv: kv[1]):
        stored = progress.saved[sig][1] if sig in progress.saved and progress.saved[sig][1] != "-" else None
        signatures.append({"signature": sig, "first_seen_s": seconds, "count": counts.get(sig, 1), "stored": stored,
                           "state": None if stored is None else _state(Path(stored))})
    return {"exit_code": int(code), "elapsed_s": round(elapsed, 1), "interrupted": progress.interrupted,
            "execs": totals.execs, "exec_per_s": round(totals.exec_per_s, 1), "cov": totals.cov, "ft": totals.ft,
            "corpus": totals.corpus, "seed": seed, "first_input_s": progress.first_input,
            "first_verdict_s": progress.first_verdict, "startup": progress.startup(),
            "worker_crashes": progress.worker_crashes, "repeats": sum(counts.values()) - len(counts),
            "signatures": signatures, "profiles": progress.profiles(),
            "tapes": {"used": totals.taped, "refused": totals.refused}}


def _state(bundle: Path) -> str | None:
    """``minimized`` when the bundle records minimization stages, ``unminimized`` when it was stored as
    found; None when it cannot be read."""
    try:
        return "minimized" if load_verdict(bundle / "verdict.json").get("stages") else "unminimized"
    except InputError:
        return None


def run_summary(record: dict[str, Any]) -> str:
    """:func:`run_record` in lines, for a person."""
    how = "interrupted after" if record["interrupted"] else "ran"
    lines = [f"gdnfuzz run: {how} {record['elapsed_s']:.1f}s: {plural(record['execs'], 'input')} "
             f"({record['exec_per_s']:.1f}/s), coverage {record['cov']:,} edges ({record['ft']:,} features), "
             f"corpus {plural(record['corpus'], 'input')}, seed {record['seed']}"]
    first, verdict = record["first_input_s"], record["first_verdict_s"]
    startup = f" ({record['startup']})" if record["startup"] else ""
    lines.append("no input was run" if first is None else f"first input after {first:.1f}s{startup}, "
                 + ("no verdict yet" if verdict is None else f"first verdict after {verdict:.1f}s"))
    tapes = record["tapes"]
    if tapes["used"] or tapes["refused"]:
        lines.append(f"the candidate's sandbox: {plural(tapes['used'], 'run')} answered from its tape, "
                     f"{plural(tapes['refused'], 'tape')} refused (each run again, one exchange a call; -v says why)")
    found = record["signatures"]
    lines.append(f"{plural(len(found), 'signature')}, {plural(record['repeats'], 'repeat')}"
                 + (f", {plural(record['worker_crashes'], 'worker crash', 'worker crashes')}"
                    if record["worker_crashes"] else "") + (":" if found else ""))
    for one in found:
        where = f"{one['state'] or 'stored'}  {one['stored']}" if one["stored"] else "not stored"
        lines.append(f"{one['first_seen_s']:8.1f}s  {one['signature']}  x{one['count']}  {where}")
    lines.extend(profile_lines(record["profiles"]))
    return "\n".join(lines)


def profile_lines(profiles: dict[str, dict[str, float]]) -> list[str]:
    """The mixture's profiles, one line each: inputs made, their seconds, features and signatures found first,
    share now (none under a pinned profile)."""
    if not profiles:
        return []
    return ["profiles (mixed): inputs made, seconds, new features, new signatures, share now:"] + [
        f"  {name:8} {int(f['execs']):>8,} {f['seconds']:>8.1f}s {int(f['features']):>7,} {int(f['findings']):>3} "
        f"{f['share']:>6.0%}" for name, f in profiles.items()]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="coverage-guided fuzzing of a candidate split against a reference (atheris)")
    p.add_argument("--target", default="split", choices=TARGETS,
                   help="split, or GDN kernel conformance")
    add_policy_args(p)
    add_fail_on_arg(p)
    p.add_argument("--max-time", type=int, default=300, help="seconds to fuzz (0: no limit)")
    p.add_argument("--runs", type=int, default=0, help="inputs per worker (0: no limit)")
    p.add_argument("--seed", type=int, default=1, help="worker i uses libFuzzer -seed=SEED+i")
    add_store_args(p)
    p.add_argument("-j", "--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--minimize-time", type=float, default=DEFAULT_MINIMIZE_SECONDS,
                   help=f"seconds to minimize each new signature (default: {DEFAULT_MINIMIZE_SECONDS:g})")
    add_search_args(p)
    p.add_argument("--add-regressions", action="store_true",
                   help="also add each finding to CORPUS/regressions")
    p.add_argument("--json", action="store_true",
                   help="end with one JSON object on stdout, not the summary")
    add_merge_args(p)
    p.add_argument("libfuzzer", nargs="*",
                   help="libFuzzer flags after -- (-merge=1: `gdnfuzz merge`)")
    p.set_defaults(func=cmd_run)
