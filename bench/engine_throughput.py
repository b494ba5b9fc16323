"""Engine tier figures on this machine: engine start, warm scenarios/s, noise floors, divergence sizes.

Prints (no assertions):
- cold start: the first run (child process, ``import vllm``, both engines built);
- warm seconds per scenario run (audit and recomputations included) over ``--runs`` runs;
- per corpus entry, as written (MTP included): the reference run's largest logprob gap to the truth
  run over every request (output noise; a greedy token outside the other run's top-k is infinite
  and is counted, never dropped), its largest clean-slot distance (state
  noise), the canary's effect on resumed requests, and the ``naive`` split's poisoned slots and
  output divergence against the truth;
- the floors against ``OUTPUT_TOLERANCE`` and ``STATE_TOLERANCE``.

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

from fuzz.model.policies import resolve_policy  # noqa: E402
from fuzz.model.scenario import load_scenario  # noqa: E402
from workers.engine.executor import (  # noqa: E402
    OUTPUT_TOLERANCE,
    EngineExecutor,
    canary_caught,
    output_divergence,
)
from workers.engine.session import STATE_TOLERANCE  # noqa: E402


def _clean_distance(notes: list[str]) -> float:
    found = (re.search(r"largest distance among clean slots ([0-9.]+)", n) for n in notes)
    return max((float(m.group(1)) for m in found if m), default=0.0)


def _span(values: list[float]) -> str:
    return f"{min(values):.3f}..{max(values):.3f}" if values else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args()
    files = args.files or sorted((ROOT / "corpus" / "regressions").glob("*.json"))
    scenarios = [(f.name, load_scenario(f)[0]) for f in files]
    vllm, naive = resolve_policy("vllm"), resolve_policy("naive")
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
        noise_flips = 0
        canary_moves: list[float] = []
        for label, scenario in scenarios:
            run, truth = engine.run(scenario, vllm), engine.truth(scenario)
            if run.status != "ok" or run.faults:
                print(f"  {label}: {run.status} {run.notes[:1] or [f.kind for f in run.faults]}")
                continue
            gaps = list(output_divergence(run, truth).values())
            noise = [d for d in gaps if math.isfinite(d)]
            noise_flips += len(gaps) - len(noise)
            out_floor = max([out_floor, *noise])
            state_floor = max(state_floor, _clean_distance(run.notes))
            canary = engine.run_canary(scenario)
            moved = [d for rid, d in output_divergence(canary, run).items() if run.requests[rid].resumed]
            canary_moves += moved
            bad = engine.run(scenario, naive)
            bad_gap = [d for rid, d in output_divergence(bad, truth).items() if bad.requests[rid].resumed]
            held = [p.held.split(" (distance")[0] for p in bad.poisoned]
            print(f"  {label}: noise {_span(noise)} ({len(gaps) - len(noise)} inf); canary caught={canary_caught(canary)} moves resumed by "
                  f"{_span(moved)}; naive poisoned {len(bad.poisoned)} {held[:2]} resumed gap {_span(bad_gap)}")
        print(f"output noise floor (max finite ref-vs-truth logprob gap): {out_floor:.3f}; OUTPUT_TOLERANCE "
              f"{OUTPUT_TOLERANCE}; requests whose greedy token left the other run's top-k: {noise_flips}")
        print(f"state noise floor (max clean-slot distance): {state_floor:.4f}; STATE_TOLERANCE {STATE_TOLERANCE}")
        print(f"canary divergence on resumed requests: {_span(canary_moves)} (inf = greedy token changed)")


if __name__ == "__main__":
    main()
