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
  started :data:`BESIDE_LEAD` seconds earlier beside it;
- ``idle, warm server`` and ``loaded, warm server`` (a checkout that has ``gdnfuzz warm``): the same runs
  with a warm server started beforehand (``fuzz.search.warm``) in a cache directory of their own, so
  their workers are forked from it; the run beside the loaded one starts cold.

A run's "first input" is its summary's ``first input after`` (seconds from the run's clock start to the first
input a worker ran), and its executions are those of its last status line (every input run before the
deadline). The run's clock starts once the ``gdnfuzz`` command has imported itself: that part (``own start``,
an interpreter importing ``fuzz.cli.run``, measured each round) is added in the "from the command's start"
column.
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


def import_seconds(module: str, checkout: Path = REPO) -> float:
    """Wall time of an interpreter that imports ``module`` and exits."""
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, capture_output=True,
                   env=env_for(checkout))
    return time.monotonic() - start


def bare_import() -> float:
    return import_seconds("vllm")


def start_run(checkout: Path, work: Path, max_time: float, **env: str) -> subprocess.Popen[str]:
    corpus = work / "corpus"
    for name in ("seeds", "regressions"):
        if (REPO / "corpus" / name).is_dir():
            shutil.copytree(REPO / "corpus" / name, corpus / name)
    return subprocess.Popen(
        [sys.executable, "-m", "fuzz.cli", "run", "--candidate", "vllm", "--reference", "vllm", "--max-time",
         str(int(max_time)), "--corpus", str(corpus), "--crashes", str(work / "crashes")],
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


def measured_run(checkout: Path, max_time: float, cache: Path | None = None) -> tuple[float | None, int, str]:
    """One run; ``cache``: its ``$GDNFUZZ_CACHE_DIR`` (default: the usual one)."""
    with tempfile.TemporaryDirectory(prefix="startup-") as tmp:
        env = {"GDNFUZZ_CACHE_DIR": str(cache)} if cache else {}
        return finish_run(start_run(checkout, Path(tmp), max_time, **env))


def warm_server(checkout: Path, cache: Path, stop: bool = False) -> None:
    """Start (or ``stop``) a warm server of ``checkout`` whose socket is under ``cache``."""
    subprocess.run([sys.executable, "-m", "fuzz.cli", "warm", *(["--stop"] if stop else [])], cwd=checkout,
                   env=env_for(checkout, GDNFUZZ_CACHE_DIR=str(cache)), check=True, capture_output=True)


def conditions(checkout: Path, max_time: float) -> list[tuple[str, float | None, int, str]]:
    """(condition, first input, execs, phases) for each condition this checkout can be measured in."""
    measured = []
    with tempfile.TemporaryDirectory(prefix="startup-kept-") as empty:
        for condition, cache in (("idle", None), ("idle, nothing kept", Path(empty))):
            measured.append((condition, *measured_run(checkout, max_time, cache)))
    with Beside(max_time):
        measured.append(("loaded", *measured_run(checkout, max_time)))
    if (checkout / "fuzz" / "search" / "warm.py").exists():
        with tempfile.TemporaryDirectory(prefix="startup-warm-") as cache:
            warm_server(checkout, Path(cache))
            try:
                measured.append(("idle, warm server", *measured_run(checkout, max_time, Path(cache))))
                with Beside(max_time):
                    measured.append(("loaded, warm server", *measured_run(checkout, max_time, Path(cache))))
            finally:
                warm_server(checkout, Path(cache), stop=True)
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="an older gdnfuzz checkout, measured in turn with this one")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--max-time", type=float, default=60.0)
    args = parser.parse_args()
    checkouts = {"after": REPO, **({"before": Path(args.before).resolve()} if args.before else {})}
    rows: dict[tuple[str, str], list[tuple[float | None, int]]] = {}
    bare: dict[str, list[float]] = {"idle": [], "loaded": []}
    own_start: list[float] = []
    for round_ in range(args.rounds):
        bare["idle"].append(bare_import())
        own_start.append(import_seconds("fuzz.cli.run"))
        with Beside(args.max_time):
            bare["loaded"].append(bare_import())
        for name, checkout in checkouts.items():
            for condition, first, execs, phases in conditions(checkout, args.max_time):
                rows.setdefault((name, condition), []).append((first, execs))
                print(f"round {round_} {name} {condition}: first input {first}s, {execs} execs; start-up: {phases}",
                      flush=True)
    print(f"\nbare `import vllm`: idle {statistics.median(bare['idle']):.1f}s, "
          f"loaded {statistics.median(bare['loaded']):.1f}s (median of {args.rounds}); gdnfuzz's own start "
          f"{statistics.median(own_start):.2f}s")
    print(f"| checkout | condition | first input (median) | from the command's start | / bare import | "
          f"execs in {args.max_time:.0f}s (median) |")
    print("|---|---|---|---|---|---|")
    for (name, condition), values in rows.items():
        firsts = [f for f, _ in values if f is not None]
        first = statistics.median(firsts) if firsts else float("nan")
        yardstick = statistics.median(bare["loaded" if condition.startswith("loaded") else "idle"])
        whole = first + statistics.median(own_start)
        print(f"| {name} | {condition} | {first:.1f}s | {whole:.1f}s | {whole / yardstick:.2f}x | "
              f"{statistics.median(e for _, e in values):.0f} |")


if __name__ == "__main__":
    main()
