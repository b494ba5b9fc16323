"""``gdnfuzz minimize FILE``: minimize one scenario by hand, keeping its signature, written with an ``origin`` (and,
against ``vllm``, the ``expect`` the corpus replay checks). Exit 1: minimized (written); 0: clean; 2: bad input."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fuzz.cli.options import add_policy_args, policies_of
from fuzz.errors import ConfigRejected, ExitCode
from fuzz.model.expectations import as_found
from fuzz.model.policies import Policy
from fuzz.model.scenario import Scenario, load_scenario, pretty_json, prompt_lengths
from fuzz.oracle.differential import replay
from fuzz.reduce.minimize import minimize, same_signature, signature_of
from fuzz.reduce.shrinker import MinimizeReport
from fuzz.store.atomic import atomic_write


def _size(scenario: Scenario, candidate: Policy, reference: Policy) -> str:
    steps = len(replay(scenario, candidate, reference).candidate.steps)
    return f"{len(scenario.requests)} requests, {sum(prompt_lengths(scenario).values())} prompt tokens, {steps} steps"


def print_report(report: MinimizeReport, candidate: Policy, reference: Policy) -> None:
    print(f"{'stage':<24} {'tried':>6} {'kept':>5} {'seconds':>8}")
    for s in report.stages:
        print(f"{s.name:<24} {s.tried:>6} {s.kept:>5} {s.seconds:>8.2f}")
    limit = " (time limit reached)" if report.timed_out else ""
    print(f"{report.passes} passes in {report.seconds:.1f} s{limit}")
    print(f"original:  {_size(report.original, candidate, reference)}")
    print(f"minimized: {_size(report.minimized, candidate, reference)}")


def _annotations(path: Path, target: str, minimized: Scenario, candidate: Policy,
                 reference: Policy) -> dict[str, Any]:
    notes: dict[str, Any] = {
        "origin": f"gdnfuzz minimize {path} --candidate {candidate.spec} --reference {reference.spec}",
        "note": f"minimized reproducer of {target}",
    }
    if reference.spec == "vllm":
        null = replay(minimized, reference, reference).verdict.status
        if null != "clean":
            print(f"gdnfuzz: warning: the minimized scenario is {null} under vllm vs vllm", file=sys.stderr)
        notes["expect"] = as_found({candidate.spec: "diverged", "vllm": null}, minimized.engine)
    return notes


def cmd_minimize(args: argparse.Namespace) -> int:
    path = Path(args.file)
    scenario, _ = load_scenario(path)
    candidate, reference = policies_of(args)
    try:
        target = signature_of(scenario, candidate, reference)
    except ConfigRejected as exc:
        raise ConfigRejected(f"{path}: engine: {exc}") from None
    if target == "clean":
        print(f"{path}: clean under {candidate.spec} vs {reference.spec}: nothing to minimize")
        return ExitCode.CLEAN
    print(f"{path}: signature {target}")
    report = minimize(scenario, same_signature(target, candidate, reference), max_seconds=args.max_time)
    print_report(report, candidate, reference)
    out = Path(args.out) if args.out else path.with_name(f"{path.stem}.min.json")
    atomic_write(out, pretty_json(report.minimized, _annotations(path, target, report.minimized,
                                                                 candidate, reference)))
    print(f"wrote {out}")
    return ExitCode.DIVERGED


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("minimize", help="minimize one scenario, keeping its finding's signature")
    p.add_argument("file", help="scenario JSON file")
    add_policy_args(p)
    p.add_argument("--out", help="where to write the minimized scenario (default FILE's stem + .min.json)")
    p.add_argument("--max-time", type=float, default=120.0, help="time limit in seconds (default 120)")
    p.set_defaults(func=cmd_minimize)
