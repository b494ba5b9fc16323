"""``gdnfuzz ci``: the code-change check for a PR (replay the corpus, fuzz for a budget, fail on new signatures).

Code-change form (``--base``, or no ``--candidate``): the PR's code against the base read from git objects;
split-only (``--candidate`` alone): against ``--reference``. Exit 0: no signature outside the baseline; 1: new
signatures; 2: bad input (a corpus or baseline file, a policy, an unrunnable split-only checkout, an unchecked
runner mirror); 5: a new signature while ``--baseline-issues`` could not be read, a base or side that cannot be had,
or, with none new, the time bound reached or a fuzzing step that ran nothing. Reports (``--out``): all but exit 2."""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fuzz import package_version
from fuzz.cli.options import add_fail_on_arg, add_policy_option
from fuzz.errors import ExitCode, InputError, ToolError
from fuzz.model.checkout import BRANCH_PREFIX, CHECKOUT_SCHEDULER_SPLIT
from fuzz.model.policies import Policy, PolicyError, not_loaded, resolve_policy
from fuzz.model.revision import is_ancestor
from fuzz.plural import plural
from fuzz.report.ci_report import Case, CiReport, mark_new
from fuzz.report.junit import render_junit
from fuzz.report.sarif import render_sarif
from fuzz.report.summary import render_summary
from fuzz.sandbox.containment import adopting_orphans
from fuzz.sandbox.scope import stop_children
from fuzz.store.atomic import atomic_write
from fuzz.triage.baseline import read_baseline
from fuzz.triage.ci import CiPaths, TimeBoundReached, corpus_files, fuzz, replay_corpus, time_bound
from fuzz.triage.code_change import SideUnavailable, candidate_policy, checkout_base, ensure_loads

DEFAULT_MAX_TIME = 1200.0
STOP_MARGIN_S = 15.0  # before the bound: stopping the fuzzers (3 s), the reducer's last store (8 s), the reports


def candidate_spec(candidate: str, mode: str) -> str:
    """What the policy resolver gets: ``branch:DIR`` for whole-branch mode, the spec as typed otherwise."""
    if mode == "split" or candidate.startswith(BRANCH_PREFIX):
        return candidate
    if not Path(candidate).is_dir():
        raise InputError(f"--candidate-mode branch: {candidate!r} is not a vLLM checkout directory")
    return BRANCH_PREFIX + candidate


def _baseline(args: argparse.Namespace) -> tuple[set[str], str, str | None]:
    """The known signatures, where they come from, and why the open issues could not be read (or None)."""
    known: set[str] = set()
    sources = []
    error = None
    for path in args.baseline:
        known |= read_baseline(path)
        sources.append(path)
    if args.baseline_issues:
        from fuzz.report.github_baseline import open_issue_signatures

        try:
            known |= open_issue_signatures(args.baseline_issues)
            sources.append(f"open issues of {args.baseline_issues}")
        except ToolError as exc:  # the API, not the input: the check runs on, and says so
            if exc.exit_code != ExitCode.INFRASTRUCTURE:
                raise
            error = f"open issues of {args.baseline_issues}: {exc}"
            print(f"gdnfuzz ci: the baseline could not be read: {error}", file=sys.stderr)
    return known, " and ".join(sources) or "no baseline", error


@dataclass(frozen=True)
class CiClock:
    """The overall bound (``--max-time``): work stops at :attr:`until`, :data:`STOP_MARGIN_S` early, to end in it."""

    started: float
    max_time: float

    @property
    def until(self) -> float:
        return self.started + self.max_time - STOP_MARGIN_S

    def say(self, text: str) -> None:
        print(f"gdnfuzz ci: [{time.time() - self.started:6.0f}s] {text}", file=sys.stderr, flush=True)


def cmd_ci(args: argparse.Namespace) -> int:
    with adopting_orphans():  # a worker's sandbox keepers, once its fork server is gone, wait here to be seen to end
        return _ci(args)


def _ci(args: argparse.Namespace) -> int:
    from workers.sim.fidelity import STRICT_ENV

    if args.fuzz_time + STOP_MARGIN_S >= args.max_time:
        raise InputError(f"--fuzz-time {args.fuzz_time}: does not fit in --max-time {args.max_time:g} (the corpus "
                         f"replay and start-up come first, and {STOP_MARGIN_S:g}s for the reports); raise --max-time")
    clock = CiClock(time.time(), args.max_time)
    if args.strict:
        os.environ[STRICT_ENV] = "1"  # this process and every harness worker refuse an unchecked mirror
    paths = CiPaths.under(Path(args.out))
    if args.base is not None or args.candidate is None:
        return _code_change(args, paths, clock)
    spec = candidate_spec(args.candidate, args.candidate_mode or "split")
    unloaded = _unloaded(spec, args.candidate)
    try:
        with time_bound(clock.until):
            candidate, reference = resolve_policy(spec), resolve_policy(args.reference or "vllm")
    except PolicyError as exc:  # the reports still say why nothing ran, then exit 2
        _write_reports(args, paths, CiReport(unloaded, unloaded, [Case(
            spec, "replay", "policy-not-loadable", "error", str(exc), 0.0)], set(), "no baseline", None))
        raise
    except TimeBoundReached:
        return _bound_while_loading(args, paths, CiReport(unloaded, unloaded, [], set(), "no baseline", None))
    known = _baseline(args)
    return _check(args, paths, CiReport(candidate, reference, [], *known), _corpus(args), clock)


def _code_change(args: argparse.Namespace, paths: CiPaths, clock: CiClock) -> int:
    """The PR's code against ``--base`` read from git objects: a side not had (or not in time) is exit 5, reports
    written; a ``--checkout`` that is no vLLM checkout is exit 2."""
    if args.reference is not None:
        raise InputError("--reference: in the code-change form the reference is the base (--base)")
    if not (Path(args.checkout) / CHECKOUT_SCHEDULER_SPLIT).is_file():
        raise InputError(f"--checkout {args.checkout}: not a vLLM checkout (no {CHECKOUT_SCHEDULER_SPLIT}): run "
                         "`gdnfuzz ci` in the pull request's vLLM checkout or give --checkout DIR (or, without "
                         "--base, --candidate DIR for the split-only form)")
    mode = args.candidate_mode or "branch"
    typed = args.candidate or args.checkout
    spec = candidate_spec(typed, mode) if Path(typed).is_dir() else typed
    baseline, source, baseline_error = _baseline(args)
    files = _corpus(args)
    try:
        with time_bound(clock.until):
            base = checkout_base(Path(args.checkout), args.base, paths.out / "base", mode)
            if args.base is not None and not is_ancestor(Path(args.checkout), base.sha, "HEAD"):
                print(f"gdnfuzz ci: warning: --base {args.base} ({base.sha[:12]}) is not an ancestor of HEAD in "
                      f"{args.checkout}: the PR is judged against code it does not build on", file=sys.stderr)
            candidate = candidate_policy(spec)
            ensure_loads(base.policy, "base", files)
            ensure_loads(candidate, "candidate", files)
    except SideUnavailable as exc:
        print(f"gdnfuzz ci: {exc}", file=sys.stderr)
        unloaded = _unloaded(spec, typed)
        report = CiReport(unloaded, unloaded, [], baseline, source, baseline_error, base=args.base, error=str(exc))
        _write_reports(args, paths, report)
        return ExitCode.INFRASTRUCTURE
    except TimeBoundReached:
        unloaded = _unloaded(spec, typed)
        return _bound_while_loading(args, paths, CiReport(unloaded, unloaded, [], baseline, source, baseline_error,
                                                          base=args.base))
    report = CiReport(candidate, base.policy, [], baseline, source, baseline_error, base=base.label)
    return _check(args, paths, report, files, clock)


def _bound_while_loading(args: argparse.Namespace, paths: CiPaths, report: CiReport) -> int:
    """The time bound passed before both sides were loaded: nothing judged, the reports say so, exit 5."""
    report.error = f"the time bound (--max-time {args.max_time:g}s) was reached while loading both sides"
    print(f"gdnfuzz ci: {report.error}", file=sys.stderr)
    _write_reports(args, paths, report)
    return ExitCode.INFRASTRUCTURE


def _corpus(args: argparse.Namespace) -> list[Path]:
    return corpus_files(Path(args.corpus), lambda path, why: print(f"gdnfuzz ci: skipped {path}: {why}",
                                                                   file=sys.stderr))


def _check(args: argparse.Namespace, paths: CiPaths, report: CiReport, files: list[Path], clock: CiClock) -> int:
    """Replay the corpus, fuzz for the budget, write the reports; the exit code (module docstring)."""
    candidate, reference = report.candidate, report.reference
    report.cases = replay_corpus(files, Path(args.corpus), candidate, reference, args.fail_on, clock.until, clock.say)
    report.fuzz_asked = float(args.fuzz_time)
    not_judged = sum(c.problem is not None for c in report.cases)
    if not_judged:
        report.time_bound = (f"the time bound (--max-time {args.max_time:g}s) was reached after "
                             f"{len(files) - not_judged} of {plural(len(files), 'corpus file')}")
    elif args.fuzz_time > 0:
        clock.say(f"fuzzing for {args.fuzz_time}s from the first verdict")
        found, progress = fuzz(Path(args.corpus), paths, candidate, reference, args.fuzz_time, args.jobs, args.seed,
                               args.fail_on, args.minimize_time, clock.until)
        report.cases += found
        report.fuzz_seconds = progress.fuzzing_seconds()
        report.fuzz_execs = progress.totals().execs
        report.fuzz_startup = progress.startup()
        report.fuzz_profiles = progress.profiles()
        report.worker_crashes = progress.worker_crashes
        if report.fuzz_seconds < args.fuzz_time - 1 and not progress.interrupted and time.time() >= clock.until:
            report.time_bound = (f"the time bound (--max-time {args.max_time:g}s) was reached after "
                                 f"{report.fuzz_seconds:.0f}s of the {args.fuzz_time}s of fuzzing asked")
        if progress.worker_crashes:
            report.cases.append(Case("harness-crash", "fuzz", "harness-crash", "crash",
                                     f"{plural(progress.worker_crashes, 'harness worker')} died; each input one was "
                                     f"running is a worker-crash finding in {paths.crashes}", 0.0))
    _write_reports(args, paths, report)
    if report.unchecked:
        return ExitCode.INFRASTRUCTURE
    if report.new_signatures:
        return ExitCode.DIVERGED
    return ExitCode.INFRASTRUCTURE if report.problems else ExitCode.CLEAN


def _unloaded(spec: str, typed: str) -> Policy:
    """A stand-in for a side that could not be loaded, so the reports can still name it."""
    return Policy(spec, spec, not_loaded(spec), "not loaded", source=(_source_file(typed), 1))


def _source_file(candidate: str) -> str:
    """The file a candidate that could not be loaded is read from (its checkout's scheduler, its .py)."""
    checkout = Path(candidate.removeprefix(BRANCH_PREFIX))
    return str(checkout / CHECKOUT_SCHEDULER_SPLIT) if checkout.is_dir() else candidate.rsplit(":", 1)[0]


def _write_reports(args: argparse.Namespace, paths: CiPaths, report: CiReport) -> None:
    """JUnit, SARIF and the summary under ``--out`` (the summary printed), once no candidate process is left."""
    stop_children()
    mark_new(report)
    paths.out.mkdir(parents=True, exist_ok=True)
    checkout = Path((args.candidate or args.checkout).removeprefix(BRANCH_PREFIX))
    root = Path(args.source_root or (checkout if checkout.is_dir() else "."))
    summary = render_summary(report, root)
    reports = {"junit.xml": render_junit(report), "gdnfuzz.sarif": render_sarif(report, root, package_version()),
               "summary.md": summary}
    for name, text in reports.items():
        atomic_write(paths.out / name, text)
    print(summary, end="")
    print(f"gdnfuzz ci: wrote {', '.join(str(paths.out / name) for name in reports)}")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("ci", help="check a vLLM PR: replay the corpus and fuzz, failing only on new signatures")
    add_policy_option(p, "--candidate",
                      help="code under test, a checkout or vllm (default: --checkout)")
    p.add_argument("--candidate-mode", choices=("split", "branch"),
                   help="the split alone or the whole branch (default: by form)")
    p.add_argument("--base", metavar="REV",
                   help="base revision of --checkout (default: the merge base)")
    p.add_argument("--checkout", default=".", metavar="DIR",
                   help="the vLLM git checkout (only read)")
    add_policy_option(p, "--reference", help="split-only form's reference (default: vllm)")
    p.add_argument("--corpus", default="corpus",
                   help="corpus root to replay (only read)")
    p.add_argument("--fuzz-time", type=int, default=60,
                   help="seconds of fuzzing (0: replay only)")
    p.add_argument("--max-time", type=float, default=DEFAULT_MAX_TIME, metavar="S",
                   help=f"seconds for the whole check (default: {DEFAULT_MAX_TIME:g})")
    p.add_argument("-j", "--jobs", type=int, default=1, help="fuzzing worker processes")
    p.add_argument("--seed", type=int, default=1, help="worker i uses libFuzzer -seed=SEED+i")
    p.add_argument("--minimize-time", type=float, default=30.0,
                   help="seconds to minimize each new signature")
    p.add_argument("--baseline", action="append", default=[], metavar="FILE",
                   help="known-signature file, one a line (# comments); repeatable")
    p.add_argument("--baseline-issues", metavar="OWNER/NAME",
                   help="also known: the signatures of its open `gdnfuzz` issues")
    p.add_argument("--out", default="gdnfuzz-out",
                   help="the one output directory")
    p.add_argument("--source-root", help="SARIF paths' root (default: the checkout, else .)")
    p.add_argument("--no-strict", dest="strict", action="store_false",
                   help="only warn on an unchecked runner mirror (default: exit 2)")
    add_fail_on_arg(p)
    p.set_defaults(func=cmd_ci)
