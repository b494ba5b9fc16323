"""Aggregate exec/s of the Ray campaign with 1 and 2 fuzzer actors, and the same loop without Ray.

Usage: ``python bench/campaign_scaling.py [--seconds S] [--candidate P] [--reference P]``

Every configuration runs the same harness (``python -m fuzz.search.harness``, the
same flags the campaign gives it) for the same S seconds of libFuzzer time
(``-max_total_time=S``, counted by libFuzzer from the end of its start-up, so
the vLLM import under instrumentation is not in the figure), from an empty
queue plus the committed regressions as seeds. The figure is libFuzzer's own
``stat::number_of_executed_units`` at exit divided by S, summed over fuzzers.

- ``direct``: one harness subprocess, no Ray at all;
- ``ray x1`` / ``ray x2``: ``gdnfuzz campaign``'s actors on an embedded local
  Ray (no verifier, no merge), the driver polling stats every 5 s.

The default policies (vllm against vllm) give no findings, so the figure is the
fuzzing loop alone (no bundle writes). Prints one line per configuration and
the Ray overhead of x1 against direct. On a machine shared with others the
figures move with their load: run it when the machine is quiet, and read the
load average it prints.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fuzz.search.libfuzzer import final_stats  # noqa: E402
from fuzz.search.settings import RunSettings  # noqa: E402
from workers.campaign.config import CampaignConfig  # noqa: E402
from workers.campaign.driver import Campaign, DriverSettings  # noqa: E402
from workers.campaign.fuzzer import harness_args, start_harness  # noqa: E402

UNITS = "number_of_executed_units"


def _config(root: Path, args: argparse.Namespace, fuzzers: int) -> CampaignConfig:
    (root / "corpus").mkdir(parents=True)
    shutil.copytree(REPO / "corpus" / "regressions", root / "corpus" / "regressions")
    run = RunSettings(candidate=args.candidate, reference=args.reference, max_time=args.seconds + 900,
                      libfuzzer=(f"-max_total_time={args.seconds}",), corpus=root / "corpus", crashes=root / "crashes")
    return CampaignConfig(run, fuzzers=fuzzers, verifiers=0, merge_every=0, drain_time=0)


def direct(root: Path, args: argparse.Namespace) -> float:
    config = _config(root, args, 1)
    proc = start_harness(harness_args(config, "direct", 1, time.time() + 900), config.harness_env(config.raw))
    final: dict[str, int] = {}
    tail: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        final_stats(line, final)
        tail = [*tail[-9:], line]
    if proc.wait() != 0 or UNITS not in final:
        print(f"direct: harness exited {proc.returncode} without final stats:\n{''.join(tail)}", file=sys.stderr)
    return final.get(UNITS, 0) / args.seconds


def with_ray(root: Path, args: argparse.Namespace, fuzzers: int) -> float:
    config = _config(root, args, fuzzers)
    with open(os.devnull, "w") as quiet:
        campaign = Campaign(config, DriverSettings(stats=root / "stats.jsonl", stats_every=5), out=quiet)
        campaign.start()
        try:
            while True:
                stats = campaign.poll()["fuzzers"]
                if len(stats) == fuzzers and all(s["done"] for s in stats.values()):
                    break
                time.sleep(5)
        finally:
            campaign.finish()
    return sum(s["final"].get(UNITS, 0) for s in stats.values()) / args.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60, help="libFuzzer seconds per configuration")
    parser.add_argument("--candidate", default="vllm")
    parser.add_argument("--reference", default="vllm")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, load average at start {os.getloadavg()[0]:.1f}; {args.seconds}s each; "
          f"{args.candidate} against {args.reference}")
    results: dict[str, float] = {}
    for label, run in (("direct", lambda r: direct(r, args)), ("ray x1", lambda r: with_ray(r, args, 1)),
                       ("ray x2", lambda r: with_ray(r, args, 2))):
        with tempfile.TemporaryDirectory(prefix="gdnfuzz-scaling-") as tmp:
            start = time.monotonic()
            results[label] = run(Path(tmp))
            print(f"{label:7s} {results[label]:7.2f} exec/s aggregate  ({time.monotonic() - start:.0f}s wall, "
                  f"load {os.getloadavg()[0]:.1f})", flush=True)
    if results["direct"]:
        overhead = 1 - results["ray x1"] / results["direct"]
        print(f"Ray overhead (x1 against direct): {overhead:+.1%} of exec/s; "
              f"scaling x2/x1: {results['ray x2'] / max(results['ray x1'], 1e-9):.2f}")


if __name__ == "__main__":
    main()
