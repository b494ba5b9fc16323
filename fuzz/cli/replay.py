"""``gdnfuzz replay FILE_OR_DIR...``: one row per scenario (a directory: its regular ``*.json`` files, sorted), each
file's shown as soon as it is done. The exit code counts only the candidate's own findings of the classes
``--fail-on`` counts (``fuzz.oracle.verdict.outcome``); ``--tier both`` adds the tiers' agreement."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fuzz.cli.options import add_deadline_arg, add_fail_on_arg, add_policy_args, apply_deadline, policies_of
from fuzz.cli.replay_output import row_view
from fuzz.cli.terminal import terminal
from fuzz.errors import ExitCode, InputError
from fuzz.model import json_input
from fuzz.model.policies import Policy
from fuzz.model.result import VerdictStatus
from fuzz.model.scenario import Scenario, load_scenario
from fuzz.oracle.differential import check_expectation, replay
from fuzz.oracle.verdict import (
    ANY,
    FailOn,
    default_fail_on,
    exit_code_for,
    finding_classes,
    finding_signature,
    outcome,
)
from fuzz.tiers import BOTH, TIERS, tiers_of


def _row(name: str, tier: str, scenario: Scenario, replayed: Any, expectation: bool | None,
         fail_on: FailOn) -> dict[str, Any]:
    """One scenario's row; ``signature`` names its finding whatever ``--fail-on`` counts, ``counted`` what it counts."""
    v = replayed.verdict
    first = v.located
    signature = finding_signature(v, scenario, replayed.candidate, FailOn(ANY))
    return {
        "file": name,
        "tier": tier,
        "verdict": v.status,
        "kind": v.summary or (v.notes[0] if v.status == VerdictStatus.UNSUPPORTED and v.notes else ""),
        "signature": signature,
        "outcome": outcome(signature),
        "counted": finding_signature(v, scenario, replayed.candidate, fail_on),
        "root_cause": asdict(v.root_cause) if v.root_cause else None,
        "side": first.side if first else None,
        "first_request": first.request_id if first else None,
        "first_step": first.step if first else None,
        "resumed": v.resumed,
        "poisoned": v.poisoned,
        "efficiency": [line for c in finding_classes() for line in c.costs(v.of(c))],  # what the candidate pays
        "expectation": {None: "-", True: "ok", False: "FAILED"}[expectation],
        "notes": v.notes,
    }


def _error_row(name: str, tier: str, error: InputError) -> dict[str, Any]:
    """The row of a file that could not be read or run: the reason in one line, where ``kind`` goes."""
    return {"file": name, "tier": tier, "verdict": "error", "kind": str(error), "error": str(error),
            "resumed": "-", "poisoned": "-", "expectation": "-"}


Loaded = tuple[str, Scenario, dict[str, Any]] | tuple[str, InputError]


def replay_rows(loaded: list[Loaded], candidate: Policy, reference: Policy, tier: str,
                fail_on: FailOn) -> Iterator[list[dict[str, Any]]]:
    """Each file's rows, yielded as soon as it is replayed (an error row for a file that fails; tier agreement)."""
    for entry in loaded:
        name = entry[0]
        per_tier = []
        try:
            if len(entry) == 2:
                raise entry[1]
            _, scenario, notes = entry
            for t in tiers_of(tier):
                replayed = replay(scenario, candidate, reference, t)
                expectation = check_expectation(notes, candidate, replayed.verdict) if t == "sim" else None
                per_tier.append(_row(name, t, scenario, replayed, expectation, fail_on))
        except InputError as exc:  # a config vLLM rejects, as a malformed file: this file's row says so
            per_tier = [_error_row(name, tier, exc)]
        if len(per_tier) == 2:
            sim_row, engine_row = per_tier
            comparable = VerdictStatus.UNSUPPORTED not in (sim_row["verdict"], engine_row["verdict"])
            agree = not comparable or (sim_row["poisoned"] > 0) == (engine_row["poisoned"] > 0)
            for r in per_tier:
                r["agreement"] = "agree" if agree else "DISAGREE"
        yield per_tier


def replay_files(loaded: list[Loaded], candidate: Policy, reference: Policy,
                 tier: str, as_json: bool, fail_on: FailOn | None = None) -> int:
    """Replay every file, showing its rows as soon as it is done (:mod:`fuzz.cli.replay_output`); any error row
    fails the call with exit 2 once every file has been replayed."""
    rows: list[dict[str, Any]] = []
    with row_view([entry[0] for entry in loaded], tier, as_json, None if as_json else terminal()) as show:
        for per_tier in replay_rows(loaded, candidate, reference, tier, fail_on or default_fail_on()):
            show(per_tier)
            rows += per_tier
    errors = [r["error"] for r in rows if "error" in r]
    if errors:
        raise InputError(f"{len(errors)} of {len(loaded)} files could not be replayed (first: {errors[0]})")
    if any(r.get("agreement") == "DISAGREE" for r in rows):
        return ExitCode.TIERS_DISAGREE
    return exit_code_for(r.get("counted", "clean") for r in rows)


def _load(name: str) -> Loaded:
    try:
        return (name, *load_scenario(name))
    except InputError as exc:
        return (name, exc)


def _skipped(path: Path, why: str) -> None:
    print(f"gdnfuzz replay: skipped {path}: {why}", file=sys.stderr)


def cmd_replay(args: argparse.Namespace) -> int:
    apply_deadline(args)
    candidate, reference = policies_of(args)
    files = json_input.expand_dirs(args.files, _skipped)
    if not files:
        raise InputError(f"{' '.join(args.files)}: no scenario files (*.json) to replay")
    loaded = [_load(str(path)) for path in files]  # all are read (and checked) before any runs
    return replay_files(loaded, candidate, reference, args.tier, args.json, args.fail_on)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("replay", help="replay scenarios under a candidate and a reference policy")
    p.add_argument("files", nargs="+", metavar="FILE_OR_DIR",
                   help="scenario files, or directories of *.json files")
    add_policy_args(p)
    p.add_argument("--tier", default="sim", choices=(*TIERS, BOTH),
                   help="the tier (both: sim and engine, compared)")
    p.add_argument("--json", action="store_true", help="print one JSON object per scenario")
    add_fail_on_arg(p)
    add_deadline_arg(p)
    p.set_defaults(func=cmd_replay)
