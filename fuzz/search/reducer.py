"""The reducer: ``gdnfuzz run``'s minimizer, a process beside the fuzzers.

``python -m fuzz.search.reducer`` reads jobs on stdin, one line ``SIGNATURE RAW_BUNDLE`` each (the
supervisor sends one per signature new to this run), and for each writes the minimized bundle
``crashes/<signature>/`` and its ``corpus/regressions/<signature>.json``, printing
``gdnfuzz-saved SIGNATURE BUNDLE`` on stdout. Settings come from the environment: GDNFUZZ_CANDIDATE,
GDNFUZZ_REFERENCE, GDNFUZZ_FAIL_ON, GDNFUZZ_CRASHES (the store), GDNFUZZ_REGRESSIONS (empty: none),
GDNFUZZ_MINIMIZE_SECONDS, GDNFUZZ_DEADLINE (seconds since the epoch; empty: none).

Invariants: a fuzzer never waits for a minimization; no finding is lost at the deadline: a
minimization in flight stops there and stores the best reduction so far (its report says the time
limit was reached), and a job that arrives later is stored as found, unminimized; a signature that
already has a bundle is not minimized again (its counts are synced by the supervisor).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from fuzz.reduce.minimize import minimize_raw_bundle
from fuzz.search.libfuzzer import SAVED_LINE
from fuzz.store.bundle import save_finding

MIN_SECONDS = 1.0  # below this before the deadline a job is stored as found


def reduce_one(sig: str, raw: Path, crashes: Path, regressions: Path | None, seconds: float) -> Path | None:
    """Minimize one raw finding for at most ``seconds`` (0: store it as found) and store its bundle."""
    bundle = crashes / sig
    if (bundle / "verdict.json").exists():
        return bundle
    finding = minimize_raw_bundle(raw, sig, os.environ["GDNFUZZ_CANDIDATE"], os.environ["GDNFUZZ_REFERENCE"],
                                  seconds, os.environ.get("GDNFUZZ_FAIL_ON", "correctness"))
    return None if finding is None else save_finding(finding, crashes, regressions)


def main() -> None:
    crashes = Path(os.environ["GDNFUZZ_CRASHES"])
    regressions = Path(os.environ["GDNFUZZ_REGRESSIONS"]) if os.environ.get("GDNFUZZ_REGRESSIONS") else None
    budget = float(os.environ.get("GDNFUZZ_MINIMIZE_SECONDS", "60"))
    deadline = float(os.environ["GDNFUZZ_DEADLINE"]) if os.environ.get("GDNFUZZ_DEADLINE") else None
    for line in sys.stdin:
        sig, raw = line.split(maxsplit=1)
        seconds = budget if deadline is None else min(budget, deadline - time.time())
        bundle = reduce_one(sig, Path(raw.strip()), crashes, regressions, seconds if seconds >= MIN_SECONDS else 0.0)
        print(f"{SAVED_LINE} {sig} {bundle if bundle is not None else '-'}", flush=True)


if __name__ == "__main__":
    main()
