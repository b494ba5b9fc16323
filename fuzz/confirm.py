"""``gdnfuzz confirm crashes/<signature>``: re-run a finding on the engine tier and record the outcome.

The bundle's minimised scenario runs on vLLM's real engine under the bundle's
candidate policy (``EngineExecutor.poison_verdict``): a real slot whose conv/SSM
tensors differ from the state its hash claims is ``confirmed``; no poisoned
slot while the canary (a deliberately corrupted slot) IS caught in the same
configuration is ``not confirmed``; anything else (the canary missed, the
engine crashed) is ``inconclusive``, never a silent pass.

Where the engine cannot run the minimised scenario's configuration (a block
size below the smallest the model allows, EAGLE with no draft head, a KV
connector), the bundle's original input is tried on the engine next. Where it
cannot run that either, the finding is re-run on the kernel tier: the real GDN
kernels on real tensors follow the real scheduler's chunks, and a resumed
request that diverges far above tolerance is ``confirmed`` there. The evidence
always names the tier and the input that decided. State and evidence go into
``verdict.json`` (``confirmed`` and ``confirmation``), written atomically.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fuzz import exit_codes
from fuzz.policies import resolve_policy
from fuzz.scenario import load_scenario
from fuzz.store import atomic_write

CONFIRMED = "confirmed"
INPUTS = ("scenario.json", "original.json")  # a bundle's minimised input first, then what the fuzzer found


def confirm_bundle(bundle: Path, tier: str = "engine", executor: Any = None) -> str:
    """Re-run ``bundle`` on ``tier`` (or on ``executor``, an EngineExecutor already warm), write the
    outcome into its verdict.json, and return the state."""
    from fuzz.issue_filing import load_verdict
    from fuzz.replay import executor_for
    from workers.engine import canary_caught, confirmation

    bundle = Path(bundle)
    verdict = load_verdict(bundle / "verdict.json")
    executor = executor or executor_for(tier)
    candidate = resolve_policy(verdict["candidate"])

    @functools.cache
    def scenario_of(name: str) -> Any:  # each input is read once, and only if a tier needs it
        return load_scenario(bundle / name)[0]

    name, outcome = _engine_outcome(executor, scenario_of, candidate)
    state = confirmation(outcome)
    evidence: dict[str, Any] = {
        "tier": tier,
        "input": name,
        "engine_verdict": outcome.verdict,
        "poisoned_slots": [p.describe() for p in outcome.result.poisoned],
        "faults": [f"{f.kind}: {f.detail.splitlines()[-1] if f.detail else ''}" for f in outcome.result.faults],
        "canary_caught": None if outcome.canary is None else canary_caught(outcome.canary),
        "notes": outcome.result.notes,
    }
    if outcome.verdict == "unsupported" and tier == "engine":
        # the kernel tier observes resumed requests only: the minimised scenario may have none
        # (the audits need none), the original input usually has one
        reference = resolve_policy(verdict["reference"])
        for name in INPUTS:
            state, evidence["fallback"] = _confirm_on_kernels(scenario_of(name), candidate, reference, name)
            if state != "inconclusive":
                break
    data = json.loads((bundle / "verdict.json").read_text())
    data.update(confirmed=state, confirmation=evidence)
    atomic_write(bundle / "verdict.json", json.dumps(data, indent=1, sort_keys=True) + "\n")
    return state


def _engine_outcome(executor: Any, scenario_of: Callable[[str], Any], candidate: Any) -> tuple[str, Any]:
    """The first input the engine can run, and its verdict (the last input's when it runs none)."""
    for name in INPUTS:
        outcome = executor.poison_verdict(scenario_of(name), candidate)
        if outcome.verdict != "unsupported":
            return name, outcome
    return name, outcome


def _confirm_on_kernels(scenario: Any, candidate: Any, reference: Any, name: str) -> tuple[str, dict[str, Any]]:
    from fuzz.oracle import CLEAN, DIVERGED
    from fuzz.replay import replay

    replayed = replay(scenario, candidate, reference, "kernels")
    state = {DIVERGED: CONFIRMED, CLEAN: "not confirmed"}.get(replayed.verdict.status, "inconclusive")
    return state, {"tier": "kernels", "input": name, "verdict": replayed.verdict.status, "kind": replayed.verdict.kind,
                   "notes": replayed.verdict.notes}


def cmd_confirm(args: argparse.Namespace) -> int:
    from fuzz.issue_filing import BundleError
    from fuzz.scenario import ScenarioError

    worst = exit_codes.CLEAN
    for bundle in args.bundles:
        try:
            state = confirm_bundle(Path(bundle), args.tier)
        except (BundleError, ScenarioError) as exc:
            print(f"gdnfuzz: {exc}", file=sys.stderr)
            return exit_codes.BAD_INPUT
        print(f"{bundle}: {state}")
        worst = max(worst, exit_codes.DIVERGED if state == CONFIRMED else exit_codes.CLEAN)
    return worst


def add_confirm_parser(sub: Any) -> None:
    p = sub.add_parser("confirm", help="re-run findings on the engine tier and record confirmed / not / inconclusive")
    p.add_argument("bundles", nargs="+", help="crashes/<signature> directories")
    p.add_argument("--tier", default="engine", choices=("engine",))
    p.set_defaults(func=cmd_confirm)
