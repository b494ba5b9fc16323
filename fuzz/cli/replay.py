"""``gdnfuzz replay FILE...``: one row per scenario, and the exit code of the whole call.

Rows: file, verdict, kind (the first finding's summary), requests resumed,
poisoned slots, and whether the file's expectation for this candidate held.
With ``--tier both`` each scenario runs on sim and engine and the row says
``agree`` or ``DISAGREE`` on the poison verdict.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from fuzz.cli.options import add_policy_args, policies_of
from fuzz.errors import ConfigRejected, ExitCode
from fuzz.model.policies import Policy
from fuzz.model.result import VerdictStatus
from fuzz.model.scenario import Scenario, load_scenario
from fuzz.triage.replay import check_expectation, replay


def _row(name: str, tier: str, replayed: Any, expectation: bool | None) -> dict[str, Any]:
    v = replayed.verdict
    first = v.first
    return {
        "file": name,
        "tier": tier,
        "verdict": v.status,
        "kind": v.summary,
        "side": first.side if first else None,
        "first_request": first.request_id if first else None,
        "first_step": first.step if first else None,
        "resumed": v.resumed,
        "poisoned": v.poisoned,
        "expectation": {None: "-", True: "ok", False: "FAILED"}[expectation],
        "notes": v.notes,
    }


def _print_table(rows: list[dict[str, Any]]) -> None:
    headers = ("file", "tier", "verdict", "resumed", "poisoned", "expect", "kind")
    table = [(r["file"], r["tier"], r["verdict"], str(r["resumed"]), str(r["poisoned"]), r["expectation"],
              r["kind"] + (f"  [{r['agreement']}]" if "agreement" in r else "")) for r in rows]
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(headers[:-1])]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=False)) + "  kind")
    for t in table:
        print("  ".join(c.ljust(w) for c, w in zip(t, widths, strict=False)) + "  " + t[-1])


def replay_files(loaded: list[tuple[str, Scenario, dict[str, Any]]], candidate: Policy, reference: Policy,
                 tier: str, as_json: bool) -> int:
    tiers = ("sim", "engine") if tier == "both" else (tier,)
    rows: list[dict[str, Any]] = []
    disagree = False
    for name, scenario, notes in loaded:
        per_tier = []
        for t in tiers:
            try:
                replayed = replay(scenario, candidate, reference, t)
            except ConfigRejected as exc:
                raise ConfigRejected(f"{name}: {exc}") from None
            expectation = check_expectation(notes, candidate, replayed.verdict) if t == "sim" else None
            per_tier.append(_row(name, t, replayed, expectation))
        if len(per_tier) == 2:
            sim_row, engine_row = per_tier
            comparable = VerdictStatus.UNSUPPORTED not in (sim_row["verdict"], engine_row["verdict"])
            agree = not comparable or (sim_row["poisoned"] > 0) == (engine_row["poisoned"] > 0)
            for r in per_tier:
                r["agreement"] = "agree" if agree else "DISAGREE"
            disagree |= not agree
        rows += per_tier
        if as_json:
            for r in per_tier:
                print(json.dumps(r, sort_keys=True), flush=True)
    if not as_json:
        _print_table(rows)
    if disagree:
        return ExitCode.TIERS_DISAGREE
    return ExitCode.DIVERGED if any(r["verdict"] == VerdictStatus.DIVERGED for r in rows) else ExitCode.CLEAN


def cmd_replay(args: argparse.Namespace) -> int:
    candidate, reference = policies_of(args)
    loaded = []
    for name in args.files:  # every file is validated before any runs: one bad file fails the call, naming it
        scenario, annotations = load_scenario(name)
        loaded.append((name, scenario, annotations))
    return replay_files(loaded, candidate, reference, args.tier, args.json)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("replay", help="replay scenarios under a candidate and a reference policy")
    p.add_argument("files", nargs="+", help="scenario JSON files")
    add_policy_args(p)
    p.add_argument("--tier", default="sim", choices=("sim", "engine", "kernels", "both"),
                   help="where to run them (both = sim and engine, compared)")
    p.add_argument("--json", action="store_true", help="print one JSON object per scenario")
    p.set_defaults(func=cmd_replay)
