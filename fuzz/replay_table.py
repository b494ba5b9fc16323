"""``gdnfuzz replay``: one row per scenario, and the exit code of the whole call.

Rows: file, verdict, kind (the first finding's summary), requests resumed,
poisoned slots, and whether the file's expectation for this candidate held.
With ``--tier both`` each scenario runs on sim and engine and the row says
``agree`` or ``DISAGREE`` on the poison verdict.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from fuzz import exit_codes
from fuzz.oracle import DIVERGED, UNSUPPORTED_VERDICT
from fuzz.policies import Policy
from fuzz.replay import check_expectation, replay


def _row(name: str, tier: str, replayed: Any, expectation: bool | None) -> dict[str, Any]:
    v = replayed.verdict
    first = v.first
    return {
        "file": name,
        "tier": tier,
        "verdict": v.status,
        "kind": v.kind,
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


def replay_files(loaded: list[tuple[str, Any, dict[str, Any]]], candidate: Policy, reference: Policy,
                 tier: str, as_json: bool) -> int:
    from workers.sim_scheduler import ConfigRejected

    tiers = ("sim", "engine") if tier == "both" else (tier,)
    rows: list[dict[str, Any]] = []
    disagree = False
    for name, scenario, notes in loaded:
        per_tier = []
        for t in tiers:
            try:
                replayed = replay(scenario, candidate, reference, t)
            except ConfigRejected as exc:
                print(f"gdnfuzz: {name}: {exc}", file=sys.stderr)
                return exit_codes.BAD_INPUT
            expectation = check_expectation(notes, candidate, replayed.verdict) if t == "sim" else None
            per_tier.append(_row(name, t, replayed, expectation))
        if len(per_tier) == 2:
            sim_row, engine_row = per_tier
            comparable = UNSUPPORTED_VERDICT not in (sim_row["verdict"], engine_row["verdict"])
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
        return exit_codes.TIERS_DISAGREE
    return exit_codes.DIVERGED if any(r["verdict"] == DIVERGED for r in rows) else exit_codes.CLEAN
