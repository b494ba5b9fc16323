"""What running a candidate in its sandbox child costs a fuzzing input: the same scenarios run on the sim tier with
the candidate sandboxed (``resolve_policy``, its child forked from this process as a worker's is), answered from
its child's tape (as every sandboxed run is: ``fuzz.sandbox.tape``) and with one exchange a call (the path of a
refused tape), and loaded in this process (``load_policy``: a benchmark's own mutant is trusted code), in
alternating passes, in one process.

Prints, for each way, the fastest pass's seconds per input (the least disturbed on a shared machine), its ratio
to in-process, the split calls per input, and the sandbox's cost per split call. Asserts nothing.

    .venv/bin/python bench/sandbox_cost.py [--candidate bench/mutants/one_line.py:lcp_from_prompt]
        [--profile batch] [--count 20] [--passes 3] [--seed 7]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fuzz.search.profiles import PROFILES  # noqa: E402

TAPED = "sandboxed, from its tape"  # as every sandboxed run is (fuzz.sandbox.tape)
PER_CALL = "sandboxed, per call"  # every call one exchange
IN_PROCESS = "in this process"

if TYPE_CHECKING:
    from fuzz.model.scenario import Scenario


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidate", default="bench/mutants/one_line.py:lcp_from_prompt")
    parser.add_argument("--reference", default="vllm")
    parser.add_argument("--profile", default="batch", choices=sorted(PROFILES))
    parser.add_argument("--count", type=int, default=20, help="scenarios per pass")
    parser.add_argument("--passes", type=int, default=3, help="passes of each way")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    from dataclasses import replace

    from fuzz.errors import ConfigRejected
    from fuzz.model.policies import Policy, load_policy, resolve_policy
    from fuzz.sandbox.channel import fork_here, quiet_children
    from fuzz.sandbox.scope import ambient
    from fuzz.search.generate import random_scenario
    from fuzz.search.harness import settle_heap
    from fuzz.tiers import executor_for

    quiet_children()
    fork_here()  # as a fuzzing worker: the candidate's child forks from this process, vLLM imported already
    ambient()
    rng = random.Random(args.seed)
    scenarios = [random_scenario(rng, PROFILES[args.profile]) for _ in range(args.count)]
    reference = resolve_policy(args.reference)
    in_process = load_policy(args.candidate)
    calls = [0]

    def counted(*call: object) -> int:
        calls[0] += 1
        return in_process.split(*call)

    sandboxed = resolve_policy(args.candidate)
    executor: Any = executor_for("sim")
    ways: dict[str, tuple[Policy, Callable[..., Any]]] = {
        TAPED: (sandboxed, executor.run), PER_CALL: (sandboxed, executor._run),
        IN_PROCESS: (replace(in_process, split=counted), executor.run)}

    def run_all(policy: Policy, way: Callable[..., Any], some: list[Scenario]) -> None:
        for scenario in some:
            with contextlib.suppress(ConfigRejected):  # a configuration vLLM rejects runs nothing
                way(scenario, policy, reference)

    for policy, way in ways.values():  # vLLM configs built and the child started before anything is timed
        run_all(policy, way, scenarios[:2])
    settle_heap()
    best = dict.fromkeys(ways, float("inf"))
    for _ in range(args.passes):
        for name, (policy, way) in ways.items():
            calls[0] = 0
            started = time.perf_counter()
            run_all(policy, way, scenarios)
            best[name] = min(best[name], (time.perf_counter() - started) / len(scenarios))
            if name == IN_PROCESS:
                per_input = calls[0] / len(scenarios)
    local = best[IN_PROCESS]
    print(f"{args.candidate}, {args.count} {args.profile} scenarios, fastest of {args.passes} passes, "
          f"{per_input:,.0f} split calls an input")
    for name in ways:
        print(f"{name:24} {best[name]:.3f} s an input  {best[name] / local:.2f}x  "
              f"{(best[name] - local) / per_input * 1e6:4.0f} us a split call over in-process")


if __name__ == "__main__":
    main()
