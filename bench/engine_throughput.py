"""Engine tier figures on this machine: engine start, warm scenarios/s, and the noise floors.

Prints (no assertions):
- cold start: the first run (child process, ``import vllm``, both engines built);
- warm seconds per scenario run (audit and recomputations included) over ``--runs`` runs;
- the output noise floor: largest ``logprob_divergence`` between the reference and the truth run
  over the corpus entries the CPU engine can run, against ``OUTPUT_TOLERANCE``;
- the state noise floor: largest audit distance among clean slots, against ``STATE_TOLERANCE``;
- the canary's output divergence (resumed requests), i.e. how far a state 8 tokens off moves them.

Run: ``.venv/bin/python bench/engine_throughput.py [--runs N] [corpus files...]``
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fuzz.policies import resolve_policy  # noqa: E402
from fuzz.scenario import load_scenario  # noqa: E402
from workers.engine import OUTPUT_TOLERANCE, EngineExecutor, output_divergence  # noqa: E402
from workers.engine_session import STATE_TOLERANCE  # noqa: E402


def _clean_distance(notes: list[str]) -> float:
    for note in notes:
        match = re.search(r"largest distance among clean slots ([0-9.]+)", note)
        if match:
            return float(match.group(1))
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args()
    files = args.files or sorted((ROOT / "corpus" / "regressions").glob("*.json"))
    scenarios = [(f.name, load_scenario(f)[0]) for f in files]
    vllm = resolve_policy("vllm")
    with EngineExecutor() as engine:
        t0 = time.perf_counter()
        first = engine.run(scenarios[0][1], vllm)
        print(f"cold start (process, import vllm, engine build, first run): {time.perf_counter() - t0:.1f} s"
              f" [{first.status}]")
        t0 = time.perf_counter()
        for _ in range(args.runs):
            engine.run(scenarios[0][1], vllm)
        per_run = (time.perf_counter() - t0) / args.runs
        print(f"warm: {per_run:.2f} s per scenario run, {1 / per_run:.2f} scenarios/s ({scenarios[0][0]})")
        out_floor = state_floor = 0.0
        canary_moves: list[float] = []
        ran = 0
        for name, scenario in scenarios:
            run, truth = engine.run(scenario, vllm), engine.run_truth(scenario)
            if run.status != "ok" or run.faults:
                print(f"  {name}: {run.status} {run.notes[:1] or [f.kind for f in run.faults]}")
                continue
            ran += 1
            gaps = [d for d in output_divergence(run, truth).values() if math.isfinite(d)]
            out_floor = max([out_floor, *gaps])
            state_floor = max(state_floor, _clean_distance(run.notes))
            canary = engine.run_canary(scenario)
            moved = [d for rid, d in output_divergence(canary, run).items() if run.requests[rid].resumed]
            canary_moves += moved
            print(f"  {name}: ref-vs-truth max {max(gaps, default=0):.3f}, canary moves resumed requests by "
                  f"{min(moved, default=float('nan')):.3f}..{max(moved, default=float('nan')):.3f}")
        print(f"corpus entries run: {ran}/{len(scenarios)}")
        print(f"output noise floor (max ref-vs-truth logprob gap): {out_floor:.3f}; OUTPUT_TOLERANCE {OUTPUT_TOLERANCE}")
        print(f"state noise floor (max clean-slot distance): {state_floor:.4f}; STATE_TOLERANCE {STATE_TOLERANCE}")
        if canary_moves:
            print(f"canary divergence on resumed requests: min {min(canary_moves):.3f}, max {max(canary_moves):.3f}")


if __name__ == "__main__":
    main()
