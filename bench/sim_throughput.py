"""Sim tier throughput, and the share of it that is vLLM's own scheduler (the harness overhead).

Runs ``SimExecutor.run`` over ``--count`` scenarios from ``fuzz.search.generate.random_scenario`` (a seeded
``random.Random``) under ``--policy``: a cold pass (vLLM configs built as knob sets first
appear), then ``--warm`` warm passes over the same scenarios (the fastest is reported: this machine
is shared, and the fastest pass is the one least disturbed). In the same runs, the scheduler returned by
``workers.sim.executor.build_scheduler`` has its ``add_request``, ``schedule``, ``update_from_output`` and
``update_draft_token_ids`` wrapped with ``perf_counter`` accumulators, so the bare vLLM scheduler
time for exactly the steps the sim ran is measured beside the sim's total. Two ratios are printed per
pass: all-in (the sim's wall time, scheduler builds included, over the bare calls: the figure the
2x target is about) and excluding builds (the harness: runner mirror, audit, request building,
result recording). vLLM's own ``Request`` construction (prompt block hashing) is timed too and
counted as harness. Prints figures, asserts nothing.

Run: ``.venv/bin/python bench/sim_throughput.py [--count 300] [--seed 1] [--policy vllm] [--warm 3]``
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import workers.sim.executor as sim  # noqa: E402
from fuzz.errors import ConfigRejected  # noqa: E402
from fuzz.model.policies import resolve_policy  # noqa: E402
from fuzz.sandbox.scope import ambient  # noqa: E402
from fuzz.search.generate import random_scenario  # noqa: E402
from workers.sim.scheduler import ConfigKey, vllm_config_for  # noqa: E402

TIMED = ("add_request", "schedule", "update_from_output", "update_draft_token_ids")


class Accumulators:
    """Seconds and calls per scheduler method, and scheduler construction time."""

    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start
                self.calls[name] += 1

        return timed

    def install(self) -> None:
        build = sim.build_scheduler

        def build_timed(*args: Any, **kwargs: Any) -> Any:
            scheduler = self.wrap("build_scheduler", build)(*args, **kwargs)
            for name in TIMED:
                setattr(scheduler, name, self.wrap(name, getattr(scheduler, name)))
            return scheduler

        sim.build_scheduler = build_timed

    def scheduler_seconds(self) -> float:
        return sum(self.seconds[n] for n in TIMED)


def one_pass(label: str, scenarios: list[Any], policy: Any) -> tuple[float, Callable[[], None]]:
    """Run the pass; returns its wall time and a function printing its figures."""
    acc = Accumulators()
    original = sim.build_scheduler
    acc.install()
    executor = sim.SimExecutor()
    steps = rejected = 0
    start = time.perf_counter()
    try:
        for s in scenarios:
            try:
                steps += len(executor.run(s, policy).steps)
            except ConfigRejected:
                rejected += 1
    finally:
        sim.build_scheduler = original
    wall = time.perf_counter() - start
    return wall, lambda: report(label, acc, wall, steps, len(scenarios) - rejected, rejected, scenarios)


def report(label: str, acc: Accumulators, wall: float, steps: int, ran: int, rejected: int,
           scenarios: list[Any]) -> None:
    bare = acc.scheduler_seconds()
    built = acc.seconds["build_scheduler"]
    print(f"{label}: {ran} scenarios ({rejected} rejected by vLLM's config checks), {steps} steps, {wall:.2f} s: "
          f"{ran / wall:.1f} scenarios/s, {steps / wall:.0f} steps/s")
    print(f"  bare scheduler calls {bare:.2f} s ({', '.join(f'{n} {acc.seconds[n]:.2f} s/{acc.calls[n]}' for n in TIMED)})")
    info = vllm_config_for.cache_info()
    print(f"  build_scheduler {built:.2f} s over {acc.calls['build_scheduler']} builds (VllmConfig cache so far: "
          f"{info.hits} hits, {info.misses} misses, maxsize {info.maxsize}; "
          f"{len({ConfigKey.of(s.engine) for s in scenarios})} distinct config keys in these scenarios)")
    rest = wall - built
    print(f"  all-in sim time / bare scheduler time = {wall / bare:.2f}x (target: within 2x)")
    print(f"  sim time excluding builds / bare scheduler time = {rest / bare:.2f}x "
          f"(harness overhead {rest - bare:.2f} s, {100 * (rest - bare) / rest:.0f}% of it)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--policy", default="vllm")
    parser.add_argument("--warm", type=int, default=3, help="warm passes (the fastest is reported)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    scenarios = [random_scenario(rng) for _ in range(args.count)]
    ambient()  # a policy named by path loads and answers in a sandbox child, as it would in gdnfuzz
    policy = resolve_policy(args.policy)
    one_pass("cold", scenarios, policy)[1]()
    warm = [one_pass("warm", scenarios, policy) for _ in range(max(1, args.warm))]
    print(f"warm passes: {', '.join(f'{w:.2f} s' for w, _ in warm)}; the fastest:")
    min(warm, key=lambda w: w[0])[1]()


if __name__ == "__main__":
    main()
