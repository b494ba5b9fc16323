"""Start-up of ``gdnfuzz run``: time to the first input and executions in the first 60 s, before and after,
idle and loaded, each beside one bare ``python -c "import vllm"`` measured in the same sitting.

Usage: ``python bench/startup.py [--before DIR] [--rounds N] [--max-time S]``

Each round runs, in turn, for this checkout and ``--before`` (an older gdnfuzz checkout; default none):

- ``bare``: ``python -c "import vllm"``, its wall time (the yardstick);
- ``idle``: ``gdnfuzz run --candidate vllm --reference vllm --max-time S`` alone, from a fresh copy of the
  committed corpus (seeds and regressions; an empty queue) into a fresh crash store;
- ``idle, nothing kept``: the same with an empty ``$GDNFUZZ_CACHE_DIR`` (a machine's first run: no kept
  instrumentation, ``fuzz.search.coverage_cache``; a checkout without it ignores the variable);
- ``loaded``: the same, and the bare import, each with a second such ``gdnfuzz run`` (this checkout)
  started :data:`BESIDE_LEAD` seconds earlier beside it.

A run's "first input" is its summary's ``first input after`` (seconds from its start to the first input a
worker ran), and its executions are those of its last status line (every input run before the deadline).
Where the run prints them, the start-up phases are shown for the first round. Prints one table; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BESIDE_LEAD = 15.0  # seconds the second run has been going when the measured one starts
FIRST_INPUT = re.compile(r"first input after ([\d.]+)s(?: \((.*?)\))?;")
EXECS = re.compile(r"\] execs (\d+) ")


def env_for(checkout: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(checkout), **extra}


def bare_import() -> float:
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", "import vllm"], check=True, capture_output=True)
    return time.monotonic() - start


def start_run(checkout: Path, work: Path, max_time: float, **env: str) -> subprocess.Popen[str]:
    corpus = work / "corpus"
    for name in ("seeds", "regressions"):
        if (REPO / "corpus" / name).is_dir():
            shutil.copytree(REPO / "corpus" / name, corpus / name)
    return subprocess.Popen(
        [sys.executable, "-m", "fuzz.cli", "run", "--candidate", "vllm", "--reference", "vllm", "--max-time",
         str(int(max_time)), "--corpus", str(corpus), "--crashes", str(work / "crashes"), "--no-regressions"],
        cwd=checkout, env=env_for(checkout, **env), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def finish_run(proc: subprocess.Popen[str]) -> tuple[float | None, int, str]:
    """(seconds to the first input, executions, start-up phases) of a finished run."""
    out, _ = proc.communicate()
    first = FIRST_INPUT.search(out)
    execs = [int(m.group(1)) for m in EXECS.finditer(out)]
    return (float(first.group(1)) if first else None, execs[-1] if execs else 0,
            (first.group(2) or "") if first else out[-300:])


class Beside:
    """A second ``gdnfuzz run`` of this checkout beside what is measured (the load)."""

    def __init__(self, max_time: float):
        self.tmp = tempfile.TemporaryDirectory(prefix="startup-beside-")
        self.proc = start_run(REPO, Path(self.tmp.name), max_time + BESIDE_LEAD + 30)

    def __enter__(self) -> Beside:
        time.sleep(BESIDE_LEAD)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.communicate()
        self.tmp.cleanup()


def measured_run(checkout: Path, max_time: float, nothing_kept: bool = False) -> tuple[float | None, int, str]:
    with tempfile.TemporaryDirectory(prefix="startup-") as tmp:
        env = {"GDNFUZZ_CACHE_DIR": str(Path(tmp) / "kept")} if nothing_kept else {}
        return finish_run(start_run(checkout, Path(tmp), max_time, **env))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="an older gdnfuzz checkout, measured in turn with this one")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--max-time", type=float, default=60.0)
    args = parser.parse_args()
    checkouts = {"after": REPO, **({"before": Path(args.before).resolve()} if args.before else {})}
    rows: dict[tuple[str, str], list[tuple[float | None, int]]] = {}
    bare: dict[str, list[float]] = {"idle": [], "idle, nothing kept": [], "loaded": []}
    for round_ in range(args.rounds):
        bare["idle"].append(bare_import())
        bare["idle, nothing kept"].append(bare["idle"][-1])
        with Beside(args.max_time):
            bare["loaded"].append(bare_import())
        for name, checkout in checkouts.items():
            for condition in ("idle", "idle, nothing kept"):
                first, execs, phases = measured_run(checkout, args.max_time, condition != "idle")
                rows.setdefault((name, condition), []).append((first, execs))
                print(f"round {round_} {name} {condition}: first input {first}s, {execs} execs; start-up: {phases}",
                      flush=True)
            with Beside(args.max_time):
                first, execs, phases = measured_run(checkout, args.max_time)
            rows.setdefault((name, "loaded"), []).append((first, execs))
            print(f"round {round_} {name} loaded: first input {first}s, {execs} execs; start-up: {phases}", flush=True)
    print(f"\nbare `import vllm`: idle {statistics.median(bare['idle']):.1f}s, "
          f"loaded {statistics.median(bare['loaded']):.1f}s (median of {args.rounds})")
    print(f"| checkout | condition | first input (median) | / bare import | execs in {args.max_time:.0f}s (median) |")
    print("|---|---|---|---|---|")
    for (name, condition), values in rows.items():
        firsts = [f for f, _ in values if f is not None]
        first = statistics.median(firsts) if firsts else float("nan")
        print(f"| {name} | {condition} | {first:.1f}s | {first / statistics.median(bare[condition]):.2f}x | "
              f"{statistics.median(e for _, e in values):.0f} |")


if __name__ == "__main__":
    main()
