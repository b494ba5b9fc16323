"""``gdnfuzz run``'s minimizer, a process beside the fuzzers: ``SIGNATURE RAW_BUNDLE`` lines in, ``gdnfuzz-saved`` out.

Invariants: a fuzzer never waits for it; at the deadline a minimization in flight stores its best so far and later
jobs are stored as found; a signature with a bundle is not minimized again; it ignores ^C (the supervisor's)."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time
from pathlib import Path

from fuzz.reduce.minimize import minimize_raw_bundle
from fuzz.report.finding_report import store_finding
from fuzz.sandbox.channel import quiet_children
from fuzz.sandbox.scope import ambient
from fuzz.search.libfuzzer import REDUCER_READY_LINE, SAVED_LINE
from fuzz.search.settings import RunSettings
from fuzz.store.bundle import store_as_found
from fuzz.tiers import REGISTRY, SCHEDULER_TIER

NICENESS = 10  # below the workers: on a small machine a minimization must not halve fuzzing
MIN_SECONDS = 1.0  # below this before the deadline a job is stored as found


def reduce_one(sig: str, raw: Path, settings: RunSettings, seconds: float) -> Path | None:
    """Minimize and store one raw finding within ``seconds`` (as found under :data:`MIN_SECONDS`); None: no ``sig``."""
    bundle = settings.crashes / sig
    if (bundle / "verdict.json").exists():
        return bundle
    if seconds < MIN_SECONDS:
        return store_as_found(raw, settings.crashes, settings.regressions)
    finding = minimize_raw_bundle(raw, sig, settings.candidate, settings.reference, seconds, settings.fail_on)
    return None if finding is None else store_finding(finding, settings.crashes, settings.regressions)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.nice(NICENESS)  # minimizing yields the CPU to the fuzzers (and its sandbox children inherit it)
    quiet_children()  # this process's output is the supervisor's channel
    ambient()  # a user's candidate loads and answers in a sandbox child, never beside the minimizer's judge
    settings = RunSettings.from_env()
    for name in REGISTRY[SCHEDULER_TIER].preload:  # vLLM's scheduling code, before the first job needs it
        importlib.import_module(name)
    print(REDUCER_READY_LINE, flush=True)
    for line in sys.stdin:
        sig, raw = line.split(maxsplit=1)
        seconds = settings.minimize_seconds
        if settings.deadline is not None:
            seconds = min(seconds, settings.deadline - time.time())
        bundle = reduce_one(sig, Path(raw.strip()), settings, seconds)
        print(f"{SAVED_LINE} {sig} {bundle if bundle is not None else '-'}", flush=True)


if __name__ == "__main__":
    main()
