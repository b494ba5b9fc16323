"""How often one input finds a candidate's bug, by how the input is made: fresh under a profile, or a profile's
mutation of another profile's scenarios. The figures a schedule over profiles (``fuzz.search.mixture``) is
made of: a mixture can only give a profile seconds, and what those seconds are worth is its inputs' hit rate
over their cost.

A source is ``fresh:P`` (``random_scenario`` under profile ``P``) or ``P<Q`` (one ``mutate_scenario`` under
``P`` of one of ``--parents`` fresh scenarios of ``Q``, the way the mixture's profile ``P`` mutates an input
profile ``Q`` made). Each input is judged as ``gdnfuzz replay`` judges it (``fuzz.reduce.minimize.signature_of``:
both sides on the sim tier, the candidate in its sandbox child); a hit is a candidate-side signature of the ``--fail-on`` class (vLLM's own
``both-side-``/``reference-side-`` findings do not count). Prints one row per source: hits over inputs judged
(a configuration vLLM rejects is not judged), seconds per input, hits per second. Asserts nothing.

    .venv/bin/python bench/hit_rates.py --candidate bench/mutants/one_line.py:lcp_from_prompt --count 100 \
        fresh:batch 'batch<batch' 'batch<prefill' fresh:chat 'chat<prefill' fresh:prefill

Measured with that command (2026-12-05, idle machine, 5 min): fresh batch 9/100 (1.22 s an input, 0.074
hits/s), batch mutating batch 5/98 (1.10 s, 0.046/s), batch mutating prefill 1/99 (0.17 s, 0.059/s), fresh
chat 1/100 (0.33 s), chat mutating prefill 0/99, fresh prefill 0/100 (0.02 s). Counts this small are
noisy: an earlier 150-input probe judging the same way gave batch mutating batch 18/150 and batch mutating
prefill 0/147. Every batch source is worth 0.05-0.1 hits a second, so a 90 s run finds this mutant about as
often as its batch-shaped seconds allow.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fuzz.oracle.verdict import FailOn, reference_is_wrong  # noqa: E402
from fuzz.search.profiles import PROFILES  # noqa: E402

if TYPE_CHECKING:
    from fuzz.model.policies import Policy
    from fuzz.model.scenario import Scenario

MUTATED_FROM = "<"


def source_maker(source: str, parents: int, seed: int) -> Callable[[random.Random], Scenario]:
    """The scenario maker a source names (module docstring); a ValueError naming it where it is not one."""
    from fuzz.search.generate import random_scenario
    from fuzz.search.mutate import mutate_scenario

    kind, _, name = source.partition(":")
    if kind == "fresh" and name in PROFILES:
        profile = PROFILES[name]
        return lambda rng: random_scenario(rng, profile)
    mutator, _, parent = source.partition(MUTATED_FROM)
    if mutator in PROFILES and parent in PROFILES:
        profile, pool_rng = PROFILES[mutator], random.Random(seed)
        pool = [random_scenario(pool_rng, PROFILES[parent]) for _ in range(parents)]
        return lambda rng: mutate_scenario(rng.choice(pool), rng, profile.max_steps, profile)
    raise ValueError(f"source {source!r}: expected fresh:PROFILE or PROFILE<PROFILE, profiles {', '.join(PROFILES)}")


def rate(source: str, candidate: Policy, reference: Policy, fail_on: FailOn, args: argparse.Namespace) -> str:
    """One source's row: its ``--count`` inputs judged."""
    from fuzz.errors import ConfigRejected
    from fuzz.reduce.minimize import signature_of

    make, rng = source_maker(source, args.parents, args.seed), random.Random(args.seed + 1)
    hits = judged = 0
    started = time.monotonic()
    for _ in range(args.count):
        scenario = make(rng)
        try:
            sig = signature_of(scenario, candidate, reference, fail_on=fail_on)
        except ConfigRejected:
            continue
        judged += 1
        hits += sig != "clean" and not reference_is_wrong(sig)
    seconds = time.monotonic() - started
    return (f"| {source} | {hits}/{judged} | {hits / max(judged, 1):.3f} | {seconds / args.count:.2f} "
            f"| {hits / seconds:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", help="fresh:PROFILE or PROFILE<PROFILE (mutator<parents)")
    parser.add_argument("--candidate", required=True)
    parser.add_argument("--reference", default="vllm")
    parser.add_argument("--fail-on", default="any", choices=("correctness", "efficiency", "any"))
    parser.add_argument("--count", type=int, default=150, help="inputs judged per source")
    parser.add_argument("--parents", type=int, default=50, help="fresh parents a mutating source draws from")
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    for source in args.sources:
        try:
            source_maker(source, 0, args.seed)
        except ValueError as exc:
            parser.error(str(exc))

    from fuzz.model.policies import resolve_policy
    from fuzz.sandbox.scope import ambient

    ambient()  # the candidate answers from a sandbox child, as in a fuzzing worker
    candidate, reference = resolve_policy(args.candidate), resolve_policy(args.reference)
    print("| source | hits/judged | hit rate | s/input | hits/s |\n|---|---|---|---|---|", flush=True)
    for source in args.sources:
        print(rate(source, candidate, reference, FailOn(args.fail_on), args), flush=True)


if __name__ == "__main__":
    main()
