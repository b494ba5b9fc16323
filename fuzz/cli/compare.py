"""``gdnfuzz compare --candidate A --reference B CORPUS...``: a split change's A/B cost (cache hits, passes, chunks).
``--json FILE`` writes every figure; ``--tier both`` adds the tiers' hit-token agreement. Exit 0, or 2 on bad input:
costs are measured here, ``gdnfuzz replay --fail-on`` fails on them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fuzz.cli.options import add_policy_args, policies_of
from fuzz.errors import ExitCode, InputError
from fuzz.model import json_input
from fuzz.model.scenario import Scenario, load_scenario
from fuzz.store.atomic import atomic_write
from fuzz.tiers import BOTH, COMPARED, executor_for, tiers_of
from fuzz.triage.compare import compare_costs, hit_agreement, summarize


def scenario_files(paths: list[str]) -> list[tuple[str, Scenario]]:
    """Every scenario named, validated (a missing one: exit 2); directories give their regular ``*.json`` files."""
    files = json_input.expand_dirs(paths, _skipped)
    missing = next((f for f in files if not f.exists()), None)
    if missing is not None:
        raise InputError(f"{missing}: no such file or directory")
    return [(str(f), load_scenario(f)[0]) for f in files]


def _skipped(path: Path, why: str) -> None:
    print(f"gdnfuzz compare: skipped {path}: {why}", file=sys.stderr)


def _pct(candidate: float, reference: float) -> str:
    return f"{(candidate - reference) / reference:+.1%}" if reference else "-"


def format_summary(summary: dict[str, Any], title: str) -> str:
    lines = [title, f"{summary['compared']} of {summary['scenarios']} scenarios compared "
                    f"({len(summary['skipped'])} skipped: a side could not run)", "",
             f"{'totals':<28}{'candidate':>12}{'reference':>12}{'delta':>10}{'relative':>10}"]
    for name, t in summary["totals"].items():
        c, r = t["candidate"], t["reference"]
        lines.append(f"  {name:<26}{c:>12,.0f}{r:>12,.0f}{c - r:>+10,.0f}{_pct(c, r):>10}")
    for scope in ("per_scenario", "per_request"):
        lines += ["", f"{scope.replace('_', ' '):<28}{'min':>8}{'p50':>8}{'p90':>8}{'max':>8}{'mean':>9}"]
        for name, sides in summary[scope].items():
            for side, d in sides.items():
                if d["n"]:
                    lines.append(f"  {name + ' (' + side[:4] + ')':<26}{d['min']:>8,.0f}{d['p50']:>8,.0f}"
                                 f"{d['p90']:>8,.0f}{d['max']:>8,.0f}{d['mean']:>9,.1f}")
    worse = ", ".join(f"{k} in {v}" for k, v in summary["candidate_pays_more"].items())
    better = ", ".join(f"{k} in {v}" for k, v in summary["candidate_pays_less"].items())
    lines += ["", f"scenarios where the candidate pays more: {worse}",
              f"scenarios where the candidate pays less: {better}"]
    return "\n".join(lines)


def format_agreement(rows: list[dict[str, Any]]) -> str:
    agree = sum(r["agree"] for r in rows)
    lines = ["", f"hit tokens, sim against engine, both on the configuration the engine runs "
                 f"(attention block = B): {agree} of {len(rows)} requests agree",
             f"  {'scenario':<48} {'side':<9} {'request':<8} {'sim':>6} {'engine':>7}"]
    lines += [f"  {Path(r['name']).name[:48]:<48} {r['side']:<9} {r['request']:<8} {r['sim']:>6} "
              f"{'-' if r['engine'] is None else r['engine']:>7}{'' if r['agree'] else '  DISAGREE'}" for r in rows]
    return "\n".join(lines)


def cmd_compare(args: argparse.Namespace) -> int:
    candidate, reference = policies_of(args)
    loaded = scenario_files(args.paths)
    tiers = tiers_of(args.tier)
    report: dict[str, Any] = {"candidate": candidate.spec, "reference": reference.spec, "tiers": {}}
    results = {}
    for tier in tiers:
        results[tier] = compare_costs(loaded, candidate, reference, tier)
        report["tiers"][tier] = summarize(results[tier])
        print(format_summary(report["tiers"][tier], f"candidate {candidate.spec} against reference "
                             f"{reference.spec}, {tier} tier"))
    if args.tier == BOTH:
        model, real = COMPARED
        as_real_runs = [(name, executor_for(real).as_run(scenario)) for name, scenario in loaded]
        report["hit_agreement"] = hit_agreement(compare_costs(as_real_runs, candidate, reference, model), results[real])
        print(format_agreement(report["hit_agreement"]))
    if args.json:
        atomic_write(args.json, json.dumps(report, indent=1, sort_keys=True) + "\n")
        print(f"\nwrote {args.json}")
    return ExitCode.CLEAN


def add_parser(sub: Any) -> None:
    p = sub.add_parser("compare", help="A/B cost table of two split policies over a corpus (cache hits, passes, chunks)")
    p.add_argument("paths", nargs="+", help="scenario files or directories of them")
    add_policy_args(p)
    p.add_argument("--tier", default="sim", choices=(*COMPARED, BOTH),
                   help="the tier (both: sim and engine, with hit-token agreement)")
    p.add_argument("--json", metavar="FILE", help="also write every figure as JSON (for gdnfuzz dashboard --compare)")
    p.set_defaults(func=cmd_compare)
