"""What whole-branch mode's exchanges cost an execution: the same generated scenarios run on the sim tier with
``branch:DIR`` (a checkout of the installed vLLM's own scheduling code, so the decisions are the built-in
``vllm``'s) and with the built-in ``vllm`` in this process, in alternating passes; and the time the deciding
process spends inside the branch's exchanges (two a scheduler step: ``schedule`` and ``update``), the
branch's own scheduler work included.

Prints per way the fastest pass's seconds per input, the branch's overhead over in-process as a share of its
execution, the exchanges per input, and the exchange time's share of a branch execution. Asserts nothing.

    .venv/bin/python bench/branch_cost.py [--profile chat] [--count 20] [--passes 3] [--seed 7]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from checkout_fixtures import make_checkout  # noqa: E402

from fuzz.search.profiles import PROFILES  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="chat", choices=sorted(PROFILES))
    parser.add_argument("--count", type=int, default=20, help="scenarios per pass")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    from fuzz.errors import ConfigRejected
    from fuzz.model.policies import resolve_policy
    from fuzz.sandbox.scope import ambient
    from fuzz.search.generate import random_scenario
    from fuzz.tiers import executor_for
    from workers.sim.branch import BranchRunner

    ambient()
    checkout = make_checkout(Path(tempfile.mkdtemp(prefix="gdnfuzz-branch-")) / "vllm-checkout")
    rng = random.Random(args.seed)
    scenarios = [random_scenario(rng, PROFILES[args.profile]) for _ in range(args.count)]
    branch, builtin, reference = resolve_policy(f"branch:{checkout}"), resolve_policy("vllm"), resolve_policy("vllm")
    executor = executor_for("sim")
    spent = [0.0, 0]
    exchange = BranchRunner.exchange

    def timed(self, message):
        started = time.perf_counter()
        try:
            return exchange(self, message)
        finally:
            spent[0] += time.perf_counter() - started
            spent[1] += 1

    BranchRunner.exchange = timed

    def run_all(policy) -> None:
        for scenario in scenarios:
            with contextlib.suppress(ConfigRejected):
                executor.run(scenario, policy, reference)

    for policy in (branch, builtin):
        run_all(policy)  # configs built, the branch's process started, before anything is timed
    best = {"branch": float("inf"), "in-process": float("inf")}
    share = 0.0
    for _ in range(args.passes):
        for name, policy in (("branch", branch), ("in-process", builtin)):
            spent[:] = [0.0, 0]
            started = time.perf_counter()
            run_all(policy)
            seconds = (time.perf_counter() - started) / len(scenarios)
            if name == "branch" and seconds < best[name]:
                share, exchanges = spent[0] / len(scenarios) / seconds, spent[1] / len(scenarios)
            best[name] = min(best[name], seconds)
    overhead = (best["branch"] - best["in-process"]) / best["branch"]
    print(f"{args.count} {args.profile} scenarios, fastest of {args.passes} passes")
    print(f"branch:DIR   {best['branch']:.3f} s an input, {exchanges:.0f} exchanges an input; inside them "
          f"{share:.0%} of the execution")
    print(f"in-process   {best['in-process']:.3f} s an input; the process boundary's overhead: {overhead:.0%} "
          f"of a branch execution")


if __name__ == "__main__":
    main()
