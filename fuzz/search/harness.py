"""The atheris harness: ``python -m fuzz.search.harness [libFuzzer flags] CORPUS_DIR...``.

Coverage feedback comes from vLLM's own scheduling code: every function of the
scheduler, the KV-cache manager and coordinator, the block pool and the helpers the
split calls (``vllm.v1.kv_cache_interface``) is patched with atheris's block probes,
counted by ``fuzz.search.coverage``, so their branches are what libFuzzer sees.

Each input is decoded into a scenario (``fuzz.search.mutate.decode``), run on the sim
tier under the candidate and the reference, and judged. A divergence is not a
libFuzzer crash (that would stop the fuzzer at the first one): it is given a
signature and saved as a raw bundle (the input as found) under GDNFUZZ_CRASHES; a
known one counts one more hit (or replay, for a committed corpus input). Each
divergence prints ``gdnfuzz-detected SIG`` and ``gdnfuzz-finding SIG RAW_BUNDLE``
on stderr, for ``gdnfuzz run`` (whose reducer minimizes it beside the fuzzer) or
the campaign's crash store to pick up.

Settings come from the environment (set by ``gdnfuzz run`` and the campaign):
GDNFUZZ_CANDIDATE, GDNFUZZ_REFERENCE, GDNFUZZ_CRASHES (this worker's raw bundles),
GDNFUZZ_FAIL_ON (correctness, efficiency or any: which class of finding is saved;
see ``fuzz.oracle.efficiency``), GDNFUZZ_COMMITTED (os.pathsep-separated corpus dirs
of committed inputs), GDNFUZZ_MAX_STEPS (the bound on a mutation's cost,
``fuzz.search.mutate.serial_steps``).
"""

from __future__ import annotations

import functools
import gc
import hashlib
import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from fuzz.errors import ConfigRejected
from fuzz.model.policies import resolve_policy
from fuzz.model.result import FailOn
from fuzz.oracle.finding import Finding
from fuzz.oracle.judge import self_consistent
from fuzz.oracle.signature import finding_signature
from fuzz.search.coverage import instrument
from fuzz.search.libfuzzer import DETECTED_LINE, FINDING_LINE, FIRST_INPUT_LINE
from fuzz.search.mutate import MAX_STEPS, crossover, decode, mutate
from fuzz.store.bundle import save_finding
from fuzz.tiers import KERNEL_CONFORMANCE_TARGET, executor_for, load
from fuzz.triage.replay import replay

INSTRUMENTED = (  # every loaded module under these names is instrumented (fuzz.search.coverage)
    "vllm.v1.core",
    "vllm.v1.kv_cache_interface",
    "vllm.v1.request",
)
SCHEDULING_MODULES = (  # imported first, so that everything the scheduler runs is loaded
    "vllm.v1.core.block_pool",
    "vllm.v1.core.kv_cache_coordinator",
    "vllm.v1.core.kv_cache_manager",
    "vllm.v1.core.kv_cache_utils",
    "vllm.v1.core.sched.scheduler",
    "vllm.v1.core.single_type_kv_cache_manager",
    "vllm.v1.kv_cache_interface",
    "vllm.v1.request",
)


@dataclass(frozen=True)
class HarnessSettings:
    candidate: str
    reference: str
    crashes: Path  # where this worker's raw bundles go (one writer: this process)
    fail_on: FailOn = FailOn.CORRECTNESS
    committed: tuple[Path, ...] = ()  # corpus dirs of committed inputs (seeds, regressions): their hits are replays
    max_steps: int = MAX_STEPS  # mutations costing more scheduler steps are dropped

    @classmethod
    def from_env(cls) -> HarnessSettings:
        committed = os.environ.get("GDNFUZZ_COMMITTED", "")
        return cls(
            candidate=os.environ.get("GDNFUZZ_CANDIDATE", "pre-51113"),
            reference=os.environ.get("GDNFUZZ_REFERENCE", "vllm"),
            crashes=Path(os.environ.get("GDNFUZZ_CRASHES", "crashes")),
            fail_on=FailOn(os.environ.get("GDNFUZZ_FAIL_ON", FailOn.CORRECTNESS)),
            committed=tuple(Path(d) for d in committed.split(os.pathsep) if d),
            max_steps=int(os.environ.get("GDNFUZZ_MAX_STEPS", MAX_STEPS)),
        )


def _digest(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


class FuzzTarget:
    """``test_one_input`` for atheris: judge, name, and save each finding raw, never stopping to minimize.

    Invariants: every input runs the candidate once (the fast path's run is the replay's); a finding
    is saved as a raw bundle (``fuzz.store.bundle.save_finding`` with the input as found) and named on
    stderr, so minimizing it (``gdnfuzz run``'s reducer, the campaign's crash store) happens beside
    the fuzzer; an occurrence whose input is a committed corpus file counts as a replay, not a hit.
    """

    def __init__(self, settings: HarnessSettings):
        self.settings = settings
        self.candidate = resolve_policy(settings.candidate)
        self.reference = resolve_policy(settings.reference)
        self.hits: Counter[str] = Counter()
        self.committed = {_digest(p.read_bytes()) for d in settings.committed if d.is_dir()
                          for p in d.glob("*.json") if p.is_file()}
        self.started = False

    def test_one_input(self, data: bytes) -> None:
        if not self.started:
            self.started = True
            print(FIRST_INPUT_LINE, file=sys.stderr, flush=True)
        scenario = decode(data)
        fail_on = self.settings.fail_on
        try:
            run = executor_for("sim").run(scenario, self.candidate)
            # Fast path (correctness only): a candidate run that is right on its own cannot be the wrong
            # side of a verdict; only then is the reference skipped (reference bugs: fuzz with --candidate
            # vllm). Efficiency is a comparison of the two runs, so it always needs the reference.
            if not fail_on.efficiency and self_consistent(run):
                return
            replayed = replay(scenario, self.candidate, self.reference, "sim", candidate_run=run)
        except ConfigRejected:
            return  # an engine config vLLM refuses is not an input, let alone a finding
        sig = finding_signature(replayed.verdict, scenario, replayed.candidate, fail_on)
        if sig == "clean":
            return
        self.hits[sig] += 1
        print(f"{DETECTED_LINE} {sig}", file=sys.stderr, flush=True)
        finding = Finding(sig, scenario, scenario, replayed.verdict, self.candidate.spec, self.reference.spec,
                          replayed.candidate, reference_run=replayed.reference, fail_on=fail_on)
        bundle = save_finding(finding, self.settings.crashes, None, replay=_digest(data) in self.committed)
        print(f"{FINDING_LINE} {sig} {bundle}", file=sys.stderr, flush=True)


GC_THRESHOLDS = (10_000, 50, 100)  # CPython's defaults: (700, 10, 10)


def settle_heap() -> None:
    """Once vLLM, torch and transformers are imported: their millions of long-lived objects leave the
    collector's generations (``gc.freeze``), and collections run less often (``GC_THRESHOLDS``: young
    ones every 10,000 allocations). An input allocates tens of thousands of short-lived objects
    (requests, block lists, states), so with the defaults the collector ran every few hundred
    allocations and its full passes walked the whole of vLLM and torch. Cycles among new objects are
    still collected."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def main(argv: list[str]) -> None:
    """GDNFUZZ_TARGET=split (default): the differential split target; =kernels: kernel conformance."""
    import atheris

    if os.environ.get("GDNFUZZ_TARGET", "split") == "kernels":
        with atheris.instrument_imports(include=["workers.kernels"]):
            kernel_conformance_one_input = load(KERNEL_CONFORMANCE_TARGET)
        atheris.Setup(argv, kernel_conformance_one_input)
        atheris.Fuzz()
        return
    probes = instrument(INSTRUMENTED, SCHEDULING_MODULES)
    settings = HarnessSettings.from_env()
    target = FuzzTarget(settings)
    settle_heap()
    atheris.Setup(argv, probes.counted(target.test_one_input),
                  custom_mutator=functools.partial(mutate, max_steps=settings.max_steps),
                  custom_crossover=functools.partial(crossover, max_steps=settings.max_steps))
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
