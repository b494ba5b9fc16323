"""The atheris harness: ``python -m fuzz.search.harness [libFuzzer flags] CORPUS_DIR...``.

Coverage feedback comes from vLLM's own scheduling code: the scheduler, the
KV-cache manager and coordinator, the block pool and the helpers the split calls
(``vllm.v1.kv_cache_interface``) are imported inside ``atheris.instrument_imports``
before anything else imports them, so their branches are what libFuzzer sees.
(gdnfuzz's own modules import vLLM only inside functions, so importing them here
first leaves vLLM unimported until ``instrument_vllm``.)

Each input is decoded into a scenario (``fuzz.search.mutate.decode``), run on the sim
tier under the candidate and the reference, and judged. A divergence is not a
libFuzzer crash (that would stop the fuzzer at the first one): it is given a
signature; a new signature is minimized and saved as a bundle, a known one bumps
its hit count. Each divergence prints ``gdnfuzz-detected SIG`` on stderr at once
and ``gdnfuzz-finding SIG PATH`` once saved, for ``gdnfuzz run`` to pick up.

Settings come from the environment (set by ``gdnfuzz run``): GDNFUZZ_CANDIDATE,
GDNFUZZ_REFERENCE, GDNFUZZ_CRASHES, GDNFUZZ_REGRESSIONS (empty: do not write
regressions), GDNFUZZ_MINIMIZE_SECONDS.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from fuzz.errors import ConfigRejected
from fuzz.model.policies import resolve_policy
from fuzz.model.result import VerdictStatus
from fuzz.model.scenario import Scenario
from fuzz.oracle.finding import Finding
from fuzz.oracle.judge import self_consistent
from fuzz.oracle.signature import signature
from fuzz.reduce.minimize import minimize, same_signature
from fuzz.search.libfuzzer import DETECTED_LINE, FINDING_LINE
from fuzz.search.mutate import crossover, decode, mutate
from fuzz.store.bundle import save_finding
from fuzz.tiers import KERNEL_CONFORMANCE_TARGET, executor_for, load
from fuzz.triage.replay import Replayed, replay

INSTRUMENTED = (
    "vllm.v1.core",
    "vllm.v1.kv_cache_interface",
    "vllm.v1.request",
)


def instrument_vllm() -> None:
    """Import vLLM's scheduling modules under atheris instrumentation (must run first)."""
    import atheris

    already = [m for m in sys.modules if m.startswith(INSTRUMENTED)]
    if already:
        raise RuntimeError(f"imported before instrumentation, so not instrumented: {already[:3]}")
    with atheris.instrument_imports(include=list(INSTRUMENTED)):
        import vllm.v1.core.block_pool  # noqa: F401
        import vllm.v1.core.kv_cache_coordinator  # noqa: F401
        import vllm.v1.core.kv_cache_manager  # noqa: F401
        import vllm.v1.core.kv_cache_utils  # noqa: F401
        import vllm.v1.core.sched.scheduler  # noqa: F401
        import vllm.v1.core.single_type_kv_cache_manager  # noqa: F401
        import vllm.v1.kv_cache_interface  # noqa: F401
        import vllm.v1.request  # noqa: F401


@dataclass(frozen=True)
class HarnessSettings:
    candidate: str
    reference: str
    crashes: Path
    regressions: Path | None
    minimize_seconds: float

    @classmethod
    def from_env(cls) -> HarnessSettings:
        regressions = os.environ.get("GDNFUZZ_REGRESSIONS", "corpus/regressions")
        return cls(
            candidate=os.environ.get("GDNFUZZ_CANDIDATE", "pre-51113"),
            reference=os.environ.get("GDNFUZZ_REFERENCE", "vllm"),
            crashes=Path(os.environ.get("GDNFUZZ_CRASHES", "crashes")),
            regressions=Path(regressions) if regressions else None,
            minimize_seconds=float(os.environ.get("GDNFUZZ_MINIMIZE_SECONDS", "60")),
        )


class FuzzTarget:
    """``test_one_input`` for atheris; keeps the signatures this process has seen."""

    def __init__(self, settings: HarnessSettings):
        self.settings = settings
        self.candidate = resolve_policy(settings.candidate)
        self.reference = resolve_policy(settings.reference)
        self.hits: Counter[str] = Counter()

    def test_one_input(self, data: bytes) -> None:
        scenario = decode(data)
        try:
            # Fast path: a candidate run that is right on its own cannot be the wrong side of a
            # verdict; only then is the reference skipped (reference bugs: fuzz with --candidate vllm).
            if self_consistent(executor_for("sim").run(scenario, self.candidate)):
                return
            replayed = replay(scenario, self.candidate, self.reference, "sim")
        except ConfigRejected:
            return  # an engine config vLLM refuses is not an input, let alone a finding
        if replayed.verdict.status != VerdictStatus.DIVERGED:
            return
        sig = signature(replayed.verdict, scenario, replayed.candidate)
        self.hits[sig] += 1
        print(f"{DETECTED_LINE} {sig}", file=sys.stderr, flush=True)
        bundle = self.save(sig, scenario, replayed)
        print(f"{FINDING_LINE} {sig} {bundle}", file=sys.stderr, flush=True)

    def save(self, sig: str, scenario: Scenario, replayed: Replayed) -> Path:
        if self.settings.minimize_seconds <= 0 or (self.settings.crashes / sig / "verdict.json").exists():
            minimized, stages, final = scenario, [], replayed
        else:
            report = minimize(scenario, same_signature(sig, self.candidate, self.reference),
                              max_seconds=self.settings.minimize_seconds)
            minimized, stages = report.minimized, report.stage_dicts()
            final = replay(minimized, self.candidate, self.reference, "sim")
        finding = Finding(sig, scenario, minimized, final.verdict, self.candidate.spec, self.reference.spec,
                          final.candidate, stages=stages)
        return save_finding(finding, self.settings.crashes, self.settings.regressions)


def main(argv: list[str]) -> None:
    """GDNFUZZ_TARGET=split (default): the differential split target; =kernels: kernel conformance."""
    import atheris

    if os.environ.get("GDNFUZZ_TARGET", "split") == "kernels":
        with atheris.instrument_imports(include=["workers.kernels"]):
            kernel_conformance_one_input = load(KERNEL_CONFORMANCE_TARGET)
        atheris.Setup(argv, kernel_conformance_one_input)
        atheris.Fuzz()
        return
    instrument_vllm()
    target = FuzzTarget(HarnessSettings.from_env())
    atheris.Setup(argv, target.test_one_input, custom_mutator=mutate, custom_crossover=crossover)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
