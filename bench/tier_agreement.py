"""Sim and engine agreement on a workload profile's scenarios (issue 25's table): vllm against vllm (a null
run on both tiers) and a split mutant against vllm (the canary of the deep region, on both tiers).

Usage: ``python bench/tier_agreement.py [--profile chat] [--count 20] [--seed 1] [--mutant SPEC] [--tier engine]
[--max-steps N]``

Scenarios come from ``draw_scenario`` with the profile (as ``gdnfuzz gen --profile`` writes them), the
first ``--count`` whose ``serial_steps`` are at most ``--max-steps`` (the CPU engine takes about a second a
hundred decode steps; the figure says how many were passed over). Each
is replayed on the sim and on ``--tier`` with ``--candidate vllm`` and with ``--candidate MUTANT`` (default
the one-line mutant whose resumed re-prefill of prompt plus outputs is split as prompt-only). Prints, per
candidate, the count of each (sim verdict, tier verdict) pair and the contradictions: one tier finding a
correctness divergence where the other, deciding the same scenario, finds none. Asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fuzz.errors import ConfigRejected  # noqa: E402
from fuzz.model.policies import resolve_policy  # noqa: E402
from fuzz.model.result import VerdictStatus  # noqa: E402
from fuzz.oracle.differential import replay  # noqa: E402
from fuzz.sandbox.scope import ambient  # noqa: E402
from fuzz.search.generate import serial_steps  # noqa: E402
from fuzz.search.mixture import draw_scenario  # noqa: E402
from fuzz.search.profiles import PROFILE_NAMES  # noqa: E402

DECIDED = (VerdictStatus.CLEAN, VerdictStatus.DIVERGED, VerdictStatus.REGRESSED)
MUTANT = "bench/mutants/one_line.py:replay_as_prompt"


def status(scenario: object, candidate: object, reference: object, tier: str) -> str:
    try:
        return replay(scenario, candidate, reference, tier).verdict.status  # type: ignore[arg-type]
    except ConfigRejected:
        return "rejected"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="chat", choices=PROFILE_NAMES)
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--mutant", default=MUTANT)
    parser.add_argument("--tier", default="engine")
    parser.add_argument("--max-steps", type=int, default=None, help="pass over longer scenarios (serial_steps)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    scenarios, passed_over = [], 0
    while len(scenarios) < args.count:
        scenario = draw_scenario(rng, args.profile)
        if args.max_steps is not None and serial_steps(scenario) > args.max_steps:
            passed_over += 1
            continue
        scenarios.append(scenario)
    print(f"{args.count} {args.profile} scenarios; {passed_over} longer than --max-steps {args.max_steps} passed over")
    ambient()  # the mutant, named by path, loads and answers in a sandbox child, as it would in gdnfuzz
    vllm = resolve_policy("vllm")
    for name, candidate in (("vllm", vllm), (args.mutant, resolve_policy(args.mutant))):
        pairs: Counter[tuple[str, str]] = Counter()
        contradictions = []
        start = time.perf_counter()
        for i, scenario in enumerate(scenarios):
            sim, other = status(scenario, candidate, vllm, "sim"), status(scenario, candidate, vllm, args.tier)
            pairs[(sim, other)] += 1
            if sim in DECIDED and other in DECIDED and (sim == VerdictStatus.DIVERGED) != (other == VerdictStatus.DIVERGED):
                contradictions.append(f"scenario {i} ({scenario.scenario_id()}): sim {sim}, {args.tier} {other}")
        print(f"\n--candidate {name} --reference vllm, {args.count} {args.profile} scenarios (seed {args.seed}), "
              f"{time.perf_counter() - start:.0f}s")
        print(f"| sim | {args.tier} | scenarios |\n|---|---|---|")
        for (sim, other), n in sorted(pairs.items()):
            print(f"| {sim} | {other} | {n} |")
        print(f"contradictions: {len(contradictions)}")
        for line in contradictions:
            print(f"  {line}")


if __name__ == "__main__":
    main()
