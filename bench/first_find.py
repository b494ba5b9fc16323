"""Time to first find of a flagless ``gdnfuzz run``: each target, each seed, each command, from an empty corpus.

A run is ``CMD run --candidate TARGET --reference vllm --fail-on any --seed S --max-time BUDGET`` with
no profile or other flag, except an empty scratch corpus and crash store of its own (so that no run
reads another's queue, and no committed corpus file hands a mutant its finding before fuzzing starts).
Its time to first find is the run's own clock at the first candidate-side signature it announces (a
``both-side-``/``reference-side-`` finding is vLLM's and does not count); a run that finds nothing in
its budget counts as the budget. Start-up (importing vLLM, instrumenting it) is inside the budget, as
a user's 90 s run has it.

The commands of one (target, seed) run at the same time, so that the checkouts compared share the
machine's load (``--command before=PATH --command after=PATH``, e.g. two wrappers that run
``gdnfuzz`` with another checkout on ``PYTHONPATH``). Prints one row per target and command: finds
out of seeds, median and each seed's time; ``--json FILE`` writes every run. Asserts nothing.

    .venv/bin/python bench/first_find.py --command before=/tmp/gdnfuzz-before --command after=.venv/bin/gdnfuzz \\
        --targets deep --seeds 1 2 3 4 5 --budget 90
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fuzz.oracle.verdict import reference_is_wrong  # noqa: E402

ANNOUNCED = re.compile(r"^\s*([\d.]+)s\s+new (\S+)")
TARGET_SETS = {  # the project's split mutants by how deep a state they need
    "deep": ("bench/mutants/one_line.py:replay_as_prompt", "bench/mutants/one_line.py:lcp_from_prompt",
             "bench/mutants/misalign_after_preemption.py:split"),
    "shallow": ("pre-51113", "bench/mutants/one_line.py:gate_on_lcp", "bench/mutants/one_line.py:never_defer",
                "bench/mutants/one_line.py:midblock_stop_inverted",
                "bench/mutants/one_line.py:tail_without_eagle_drop"),
}


def first_find(command: str, target: str, seed: int, budget: float) -> dict[str, object]:
    """One flagless run of ``target``: seconds to its first candidate-side signature (None: not in budget)."""
    with tempfile.TemporaryDirectory(prefix="first-find-") as scratch:
        argv = [command, "run", "--candidate", target if ":" not in target or target.startswith("branch:")
                else str(ROOT / target), "--reference", "vllm", "--fail-on", "any", "--seed", str(seed),
                "--max-time", str(int(budget)), "--corpus", f"{scratch}/corpus", "--crashes", f"{scratch}/crashes"]
        started = time.monotonic()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                                start_new_session=True)
        assert proc.stdout is not None
        found: tuple[float, str] | None = None
        last = ""
        for line in proc.stdout:
            last = line.strip() or last
            m = ANNOUNCED.match(line)
            if m and not reference_is_wrong(m.group(2)):
                found = (float(m.group(1)), m.group(2))
                break
        _end(proc)
        return {"command": command, "target": target, "seed": seed, "seconds": found[0] if found else None,
                "signature": found[1] if found else None, "wall": round(time.monotonic() - started, 1),
                "last_line": last}


def _end(proc: subprocess.Popen[str]) -> None:
    """Stop a run and everything it started (its session), politely first."""
    for sig, wait in ((signal.SIGINT, 20), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
    if proc.stdout is not None:
        proc.stdout.close()


def summarize(runs: list[dict[str, object]], budget: float) -> None:
    print(f"\n| target | command | found | median s (not found = {budget:.0f}) | each seed |")
    print("|---|---|---|---|---|")
    keys = sorted({(str(r["target"]), str(r["command"])) for r in runs})
    for target, command in keys:
        mine = sorted((r for r in runs if r["target"] == target and r["command"] == command), key=lambda r: r["seed"])
        times = [float(r["seconds"]) if r["seconds"] is not None else budget for r in mine]  # type: ignore[arg-type]
        found = sum(r["seconds"] is not None for r in mine)
        each = " ".join(f"{t:.0f}" if r["seconds"] is not None else "-" for t, r in zip(times, mine, strict=True))
        print(f"| {target} | {command} | {found}/{len(mine)} | {statistics.median(times):.1f} | {each} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--command", action="append", required=True, help="NAME=PATH of a gdnfuzz to run (repeat)")
    ap.add_argument("--targets", nargs="+", default=["deep"],
                    help=f"candidates, or a set name: {', '.join(TARGET_SETS)}")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("--budget", type=float, default=90)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    commands = dict(c.split("=", 1) for c in args.command)
    targets = [t for name in args.targets for t in TARGET_SETS.get(name, (name,))]
    runs: list[dict[str, object]] = []
    with ThreadPoolExecutor(len(commands)) as pool:
        for target in targets:
            for seed in args.seeds:
                done = pool.map(first_find, commands.values(), [target] * len(commands), [seed] * len(commands),
                                [args.budget] * len(commands))
                for name, run in zip(commands, done, strict=True):
                    run["command"] = name
                    runs.append(run)
                    shown = "-" if run["seconds"] is None else f"{run['seconds']:.1f}s {run['signature']}"
                    print(f"  {target} seed {seed} {name}: {shown}", flush=True)
                if args.json:
                    args.json.write_text(json.dumps(runs, indent=1))
    summarize(runs, args.budget)


if __name__ == "__main__":
    main()
