"""``gdnfuzz run`` throughput: exec/s of a fuzzing run per candidate, for one or two checkouts interleaved in
one sitting, and the sim's share of an execution.

Usage: ``python bench/run_throughput.py [--seconds 90] [--rounds 2] [--checkout DIR ...]
[--candidates vllm,pre-51113,FILE:pre-51113] [--seed 1] [--busy N]``

Each round runs, for every checkout (default this one; ``--checkout`` again for a second, e.g. an older
one, to compare before and after in the same sitting) and every candidate, ``gdnfuzz run --candidate C
--reference vllm --max-time S`` on an empty corpus (one worker, ``--seed``), one after another, so a loaded
machine's noise falls on every configuration alike. ``FILE:pre-51113`` is the pre-#51113 split written
to a policy file: the same decisions as the built-in, run as a user's candidate (in its sandbox child).
``--busy N`` runs N busy loops beside every run (started before the first, stopped after the last), as a
shared CI runner is. Printed per run: the executions the run reported at its end, over ``S`` (start-up
included), the last exec/s libFuzzer reported, the first verdict's second and the run's own start-up
(interpreter and vLLM import, as its summary reports them) and their ratio, and the sandboxed runs answered
from their tape and refused. Then, in this process, the sim's share: the milliseconds one execution's
candidate run takes on the sim tier (``executor.run(scenario, candidate, reference)``, the harness's
fast path, over generated scenarios) against the milliseconds per execution of this checkout's runs.
Asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.load import busy_loops  # noqa: E402

STATUS = re.compile(r"execs (\d+) exec/s (\d+)")
STARTUP = re.compile(r"(interpreter and gdnfuzz|importing vLLM's scheduling code) ([\d.]+)s")


@dataclass
class Run:
    execs: int = 0
    last: int = 0  # the last exec/s libFuzzer reported
    first_verdict: float = float("nan")
    startup: float = float("nan")  # interpreter and gdnfuzz, and vLLM's import
    taped: int = 0
    refused: int = 0


def policy_file(directory: Path) -> str:
    """The pre-#51113 split as a user's policy file."""
    from fuzz.model.policies import _pre_51113_split

    path = directory / "pre51113_copy.py"
    path.write_text("from typing import Any\n" + inspect.getsource(_pre_51113_split))
    return f"{path}:_pre_51113_split"


def one_run(checkout: Path, candidate: str, seconds: int, work: Path, seed: int = 1) -> Run:
    """``gdnfuzz run --json`` of ``candidate`` from ``checkout``: what it reported."""
    corpus, crashes = Path(tempfile.mkdtemp(dir=work)), Path(tempfile.mkdtemp(dir=work))
    env = {**os.environ, "PYTHONPATH": str(checkout), "GDNFUZZ_CACHE_DIR": str(work / "cache")}
    done = subprocess.run([sys.executable, "-P", "-m", "fuzz.cli", "run", "--candidate", candidate, "--reference", "vllm",
                           "--max-time", str(seconds), "--seed", str(seed), "--corpus", str(corpus), "--crashes", str(crashes),
                           "--json"], cwd=work, env=env, capture_output=True, text=True, timeout=seconds * 4 + 300)
    found = STATUS.findall(done.stderr)
    run = Run(*(int(found[-1][0]), int(found[-1][1])) if found else (0, 0))
    with contextlib.suppress(ValueError, IndexError):
        record = json.loads(done.stdout.strip().splitlines()[-1])
        run.execs = record["execs"]
        run.first_verdict = record["first_verdict_s"] if record["first_verdict_s"] is not None else float("nan")
        phases = STARTUP.findall(record["startup"] or "")
        run.startup = sum(float(s) for _, s in phases) if len(phases) == 2 else float("nan")
        tapes = record.get("tapes", {})
        run.taped, run.refused = tapes.get("used", 0), tapes.get("refused", 0)
    return run


def sim_ms(candidate: str, count: int = 200) -> float:
    """Milliseconds per scenario of the harness's fast path (the candidate's run, the reference asked at each
    split call) over ``count`` generated scenarios, after a warm-up pass."""
    from fuzz.errors import ConfigRejected
    from fuzz.model.policies import resolve_policy
    from fuzz.search.generate import random_scenario
    from fuzz.tiers import executor_for

    rng = random.Random(1)
    scenarios = [random_scenario(rng) for _ in range(count)]
    cand, ref, sim = resolve_policy(candidate), resolve_policy("vllm"), executor_for("sim")
    timings = []
    for _ in range(2):
        start = time.perf_counter()
        for scenario in scenarios:
            with contextlib.suppress(ConfigRejected):  # a configuration vLLM refuses is not an execution
                sim.run(scenario, cand, ref)
        timings.append((time.perf_counter() - start) * 1000 / count)
    return timings[-1]


def main() -> None:
    from fuzz.sandbox.scope import ambient

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=90)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--checkout", action="append", default=None, help="a gdnfuzz checkout (repeatable)")
    parser.add_argument("--candidates", default="vllm,pre-51113,FILE:pre-51113")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--busy", type=int, default=0, metavar="N", help="busy loops beside every run")
    args = parser.parse_args()
    ambient()
    checkouts = [Path(c).resolve() for c in (args.checkout or [str(REPO)])]
    work = Path(tempfile.mkdtemp(prefix="gdnfuzz-throughput-"))
    candidates = {c: policy_file(work) if c == "FILE:pre-51113" else c for c in args.candidates.split(",")}
    results: dict[tuple[Path, str], list[Run]] = {}
    print(f"{args.seconds} s runs, {args.rounds} round(s), one worker, empty corpus, seed {args.seed}, "
          f"{args.busy} busy loop(s) beside; load {os.getloadavg()[0]:.1f}")
    print("| round | checkout | candidate | execs | execs/s over the run | last exec/s | first verdict s | start-up s "
          "| verdict / start-up | taped | refused |\n|---|---|---|---|---|---|---|---|---|---|---|")
    with busy_loops(args.busy):
        for round_ in range(args.rounds):
            for name, spec in candidates.items():
                for checkout in checkouts:
                    run = one_run(checkout, spec, args.seconds, work, args.seed)
                    results.setdefault((checkout, name), []).append(run)
                    print(f"| {round_ + 1} | {checkout} | {name} | {run.execs} | {run.execs / args.seconds:.1f} | "
                          f"{run.last} | {run.first_verdict:.1f} | {run.startup:.1f} | "
                          f"{run.first_verdict / run.startup:.2f} | {run.taped} | {run.refused} |", flush=True)
    print(f"\nload at the end {os.getloadavg()[0]:.1f}\n\n| checkout | candidate | median execs/s | sim ms per exec "
          "(this process) | ms per exec in the run | sim's share |\n|---|---|---|---|---|---|")
    for name, spec in candidates.items():
        ms = sim_ms(spec)  # this checkout's sim and sandbox: its share is given for this checkout's runs only
        for checkout in (c for c in checkouts if c == REPO):
            rate = statistics.median(r.execs / args.seconds for r in results[(checkout, name)])
            per_exec = 1000 / rate if rate else float("inf")
            print(f"| {checkout} | {name} | {rate:.1f} | {ms:.2f} | {per_exec:.2f} | {ms / per_exec:.0%} |")


if __name__ == "__main__":
    main()
