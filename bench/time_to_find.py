"""Time to first finding: coverage-guided atheris against plain random generation, in one run.

For each seed, two worker processes run in turn with the same time budget and
the same candidate/reference policies, from an empty corpus:
- guided: ``python -m fuzz.search.harness`` (libFuzzer + gdnfuzz's structure-aware
  mutator, coverage from vLLM's instrumented scheduler);
- random: fresh scenarios from ``fuzz.search.generate.random_scenario`` (the same biased
  generator the fuzzer's byte decoder uses), no feedback.
Each stops at its first finding of the class the target counts (``--fail-on``: correctness, or
``any`` for the efficiency mutants, whose slots stay exact) that the candidate brought: a finding
the reference has too (``both-side-``, vLLM's own bugs, found under any candidate) does not count.
The guided worker runs with ``gdnfuzz run``'s libFuzzer flags (``DEFAULT_FLAGS``) and step bound. Times are counted from the moment the
worker is ready (libFuzzer's INITED line / the first scenario run), so
``import vllm`` and instrumentation are not charged to either side.

    .venv/bin/python bench/time_to_find.py --seeds 1 2 3 4 5 --budget 300 --candidate pre-51113
    .venv/bin/python bench/time_to_find.py --harder --seeds 1 --budget 60   # the mutant table
    .venv/bin/python bench/time_to_find.py --deep --profile chat --budget 90   # deep-state mutants

``--profile`` weights both sides toward a workload shape (``fuzz.search.profiles``): the guided side's
mutations and step bound, the random side's generator.

``--harder`` runs the target set of ``HARDER``: split mutants under ``bench/mutants/`` that reach
branches the seed bug does not (EAGLE block drop, early aligned ends, external tokens, internal
checkpoints, shared-prefix junctions, a deep state: a request resumed after preemption), two of them
efficiency-only, and prints one table. ``--deep`` runs ``DEEP``: one-line mutants of vLLM's split
that only a request resumed after decoding reaches (``bench/mutants/one_line.py``).
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

from fuzz.oracle.verdict import FailOn, fail_on_choices, reference_is_wrong  # noqa: E402
from fuzz.search.libfuzzer import DEFAULT_FLAGS, DETECTED_LINE, harness_command  # noqa: E402
from fuzz.search.mixture import draw_scenario  # noqa: E402
from fuzz.search.profiles import DEFAULT_PROFILE, PROFILE_NAMES, max_steps_of_profile  # noqa: E402
from fuzz.search.settings import RunSettings  # noqa: E402

READY, FOUND = "gdnfuzz-bench-ready", DETECTED_LINE
HARDER = (  # (candidate, the finding class that counts)
    ("bench/mutants/ignore_eagle_block_drop.py:split", "any"),
    ("bench/mutants/early_aligned_end.py:split", "any"),
    ("bench/mutants/ignore_external_start.py:split", "correctness"),
    ("bench/mutants/checkpoint_every_final_chunk.py:split", "correctness"),
    ("bench/mutants/drop_junction_stop.py:split", "any"),
    ("bench/mutants/misalign_after_preemption.py:split", "correctness"),
)
DEEP = (  # the resumed re-prefill of prompt plus outputs split as prompt-only; last_cache_position from the prompt
    ("bench/mutants/one_line.py:replay_as_prompt", "correctness"),
    ("bench/mutants/one_line.py:lcp_from_prompt", "any"),
)


def random_worker(seed: int, candidate: str, reference: str, budget: float, fail_on_name: str,
                  profile_name: str) -> None:
    from fuzz.errors import ConfigRejected
    from fuzz.model.policies import resolve_policy
    from fuzz.oracle.differential import replay
    from fuzz.oracle.verdict import finding_signature
    from fuzz.sandbox.scope import ambient
    from fuzz.search.generate import random_scenario

    ambient()  # the mutant answers from a sandbox child, as in the guided run's workers
    fail_on = FailOn(fail_on_name)

    cand, ref = resolve_policy(candidate), resolve_policy(reference)
    rng = random.Random(seed)
    replay(random_scenario(random.Random(-1)), cand, ref)  # warm-up, like libFuzzer's INITED
    print(READY, file=sys.stderr, flush=True)
    start, execs = time.monotonic(), 0
    while time.monotonic() - start < budget:
        scenario = draw_scenario(rng, profile_name)
        execs += 1
        try:
            replayed = replay(scenario, cand, ref)
        except ConfigRejected:
            continue
        sig = finding_signature(replayed.verdict, scenario, replayed.candidate, fail_on)
        if sig != "clean" and not reference_is_wrong(sig):
            print(f"{FOUND} {sig} execs={execs}", file=sys.stderr, flush=True)
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
        if line.startswith(FOUND) and ready is not None and not reference_is_wrong(line.split()[1]):
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
    ap.add_argument("--fail-on", default="correctness", choices=fail_on_choices())
    ap.add_argument("--harder", action="store_true", help="run the HARDER target set instead of --candidate")
    ap.add_argument("--deep", action="store_true", help="run the DEEP target set instead of --candidate")
    ap.add_argument("--profile", default=DEFAULT_PROFILE, choices=PROFILE_NAMES)
    ap.add_argument("--random-worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.random_worker is not None:
        random_worker(args.random_worker, args.candidate, args.reference, args.budget, args.fail_on, args.profile)
        return
    targets = HARDER if args.harder else DEEP if args.deep else ((args.candidate, args.fail_on),)
    table = [compare(candidate, fail_on, args) for candidate, fail_on in targets]
    print(f"\nbudget {args.budget:.0f}s per side, seeds {args.seeds}, reference {args.reference}, "
          f"profile {args.profile}; "
          "time not found counted as the budget")
    print("| target | fail on | guided found | guided median | random found | random median | random/guided |")
    print("|---|---|---|---|---|---|---|")
    for row in table:
        print("| " + " | ".join(row) + " |")


def compare(candidate: str, fail_on: str, args: argparse.Namespace) -> list[str]:
    """Guided then random on ``candidate`` for every seed; one table row."""
    rows = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            env = RunSettings(candidate=candidate, reference=args.reference, fail_on=FailOn(fail_on),
                              profile=args.profile, max_steps=max_steps_of_profile(args.profile),
                              crashes=Path(tmp) / "crashes", minimize_seconds=0.0, write_regressions=False).child_env()
            os.makedirs(f"{tmp}/queue")
            guided = measure(harness_command([*DEFAULT_FLAGS, f"-seed={seed}",
                                              f"-max_total_time={int(args.budget) + 60}", f"{tmp}/queue"]),
                             env, args.budget, "INITED")
            plain = measure([sys.executable, __file__, "--random-worker", str(seed), "--budget", str(args.budget),
                             "--candidate", candidate, "--reference", args.reference, "--fail-on", fail_on,
                             "--profile", args.profile],
                            env, args.budget, READY)
        rows.append((guided, plain))
        print(f"{candidate} seed {seed}: guided {_fmt(guided[0])} ({guided[1]})  random {_fmt(plain[0])} "
              f"({plain[1]})", flush=True)
    g = [r[0][0] if r[0][0] is not None else args.budget for r in rows]
    p = [r[1][0] if r[1][0] is not None else args.budget for r in rows]
    found = (sum(r[0][0] is not None for r in rows), sum(r[1][0] is not None for r in rows))
    name = candidate.split(":")[-1] if candidate.startswith("bench/mutants/one_line.py") else Path(candidate.split(":")[0]).stem
    return [name, fail_on, f"{found[0]}/{len(rows)}", f"{statistics.median(g):.1f}s", f"{found[1]}/{len(rows)}",
            f"{statistics.median(p):.1f}s", f"{statistics.median(p) / max(statistics.median(g), 1e-3):.2f}"]


def _fmt(seconds: float | None) -> str:
    return "not found" if seconds is None else f"{seconds:.1f}s"


if __name__ == "__main__":
    main()
