"""Time to first finding: coverage-guided atheris against plain random generation, in one run.

For each seed, two worker processes run in turn with the same time budget and
the same candidate/reference policies, from an empty corpus:
- guided: ``python -m fuzz.search.harness`` (libFuzzer + gdnfuzz's structure-aware
  mutator, coverage from vLLM's instrumented scheduler);
- random: fresh scenarios from ``fuzz.search.generate.random_scenario`` (the same biased
  generator the fuzzer's byte decoder uses), no feedback.
Each stops at its first divergence. Times are counted from the moment the
worker is ready (libFuzzer's INITED line / the first scenario run), so
``import vllm`` and instrumentation are not charged to either side.

    .venv/bin/python bench/time_to_find.py --seeds 1 2 3 4 5 --budget 300 --candidate pre-51113
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the random worker runs this file: it must import this tree's fuzz/

from fuzz.search.libfuzzer import DETECTED_LINE, harness_command  # noqa: E402

READY, FOUND = "gdnfuzz-bench-ready", DETECTED_LINE


def random_worker(seed: int, candidate: str, reference: str, budget: float) -> None:
    from fuzz.errors import ConfigRejected
    from fuzz.model.policies import resolve_policy
    from fuzz.oracle.signature import signature
    from fuzz.search.generate import random_scenario
    from fuzz.triage.replay import replay

    cand, ref = resolve_policy(candidate), resolve_policy(reference)
    rng = random.Random(seed)
    replay(random_scenario(random.Random(-1)), cand, ref)  # warm-up, like libFuzzer's INITED
    print(READY, file=sys.stderr, flush=True)
    start, execs = time.monotonic(), 0
    while time.monotonic() - start < budget:
        scenario = random_scenario(rng)
        execs += 1
        try:
            replayed = replay(scenario, cand, ref)
        except ConfigRejected:
            continue
        if replayed.verdict.status == "diverged":
            print(f"{FOUND} {signature(replayed.verdict, scenario, replayed.candidate)} execs={execs}",
                  file=sys.stderr, flush=True)
            return


def measure(cmd: list[str], env: dict[str, str], budget: float, ready_marker: str) -> tuple[float | None, str]:
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)
    assert proc.stderr is not None
    ready: float | None = None
    found: tuple[float | None, str] = (None, "-")
    for line in proc.stderr:
        now = time.monotonic()
        if ready is None and ready_marker in line:
            ready = now
        if line.startswith(FOUND) and ready is not None:
            found = (now - ready, line.split()[1])
            break
        if ready is not None and now - ready > budget:
            break
    proc.kill()
    proc.wait()
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--budget", type=float, default=300)
    ap.add_argument("--candidate", default="pre-51113")
    ap.add_argument("--reference", default="vllm")
    ap.add_argument("--random-worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.random_worker is not None:
        random_worker(args.random_worker, args.candidate, args.reference, args.budget)
        return
    rows = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "GDNFUZZ_CANDIDATE": args.candidate, "GDNFUZZ_REFERENCE": args.reference,
                   "GDNFUZZ_CRASHES": f"{tmp}/crashes", "GDNFUZZ_REGRESSIONS": "", "GDNFUZZ_MINIMIZE_SECONDS": "0"}
            os.makedirs(f"{tmp}/queue")
            guided = measure(harness_command([f"-seed={seed}", "-max_len=16384",
                                              f"-max_total_time={int(args.budget) + 60}", f"{tmp}/queue"]),
                             env, args.budget, "INITED")
            plain = measure([sys.executable, __file__, "--random-worker", str(seed), "--budget", str(args.budget),
                             "--candidate", args.candidate, "--reference", args.reference], env, args.budget, READY)
        rows.append((seed, guided, plain))
        print(f"seed {seed}: guided {_fmt(guided[0])} ({guided[1]})  random {_fmt(plain[0])} ({plain[1]})", flush=True)
    budget = args.budget
    g = [r[1][0] if r[1][0] is not None else budget for r in rows]
    p = [r[2][0] if r[2][0] is not None else budget for r in rows]
    print(f"\ncandidate {args.candidate} vs {args.reference}, budget {budget:.0f}s, seeds {args.seeds}")
    print(f"guided: found {sum(r[1][0] is not None for r in rows)}/{len(rows)}, median {statistics.median(g):.1f}s, "
          f"worst {max(g):.1f}s")
    print(f"random: found {sum(r[2][0] is not None for r in rows)}/{len(rows)}, median {statistics.median(p):.1f}s, "
          f"worst {max(p):.1f}s")
    print(f"median ratio random/guided: {statistics.median(p) / max(statistics.median(g), 1e-3):.2f} "
          "(time not found counted as the budget)")


def _fmt(seconds: float | None) -> str:
    return "not found" if seconds is None else f"{seconds:.1f}s"


if __name__ == "__main__":
    main()
