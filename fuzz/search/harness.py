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

Settings come from the parent (``gdnfuzz run``, ``gdnfuzz ci``, the campaign, a merge) as one
``fuzz.search.settings.RunSettings`` in the environment: the policies, which finding classes are
saved (``fail_on``), this worker's raw bundle directory (``crashes``), the committed corpus dirs (from
``corpus``), the target, the workload profile mutations lean toward (``mixed``: every profile, in shares
``fuzz.search.mixture`` adapts to what each finds), and the bound on a mutation's cost (``max_steps``,
``fuzz.search.mutate.serial_steps``).
"""

from __future__ import annotations

import functools
import gc
import hashlib
import importlib
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from fuzz.errors import ConfigRejected, ExitCode, InputError
from fuzz.model.deadline import exit_when_stuck
from fuzz.model.policies import resolve_policy
from fuzz.model.result import RunResult
from fuzz.oracle.differential import replay
from fuzz.oracle.finding import Finding
from fuzz.oracle.verdict import finding_signature, reference_is_wrong
from fuzz.report.finding_report import store_finding
from fuzz.sandbox import tape
from fuzz.sandbox.channel import fork_here, quiet_children
from fuzz.sandbox.scope import ambient
from fuzz.search import aim
from fuzz.search.coverage import Probes, instrument
from fuzz.search.folding import KnownBugs
from fuzz.search.in_flight import InFlight
from fuzz.search.libfuzzer import (
    DETECTED_LINE,
    EXECS_LINE,
    FINDING_LINE,
    FIRST_INPUT_LINE,
    PROFILES_LINE,
    STARTING_LINE,
    UNUSABLE_LINE,
)
from fuzz.search.mixture import Mixture, Novelty
from fuzz.search.mutate import crossover, decode, mutate
from fuzz.search.profiles import MIXED, PROFILES, Profile
from fuzz.search.repeats import Repeats, cheap_key
from fuzz.search.settings import RunSettings
from fuzz.tiers import KERNEL_CONFORMANCE_TARGET, executor_for, load

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
EXECS_EVERY_S = 1.0  # how often a worker says how many inputs it has judged (libFuzzer is silent for long spells)


def _digest(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


class FuzzTarget:
    """``test_one_input`` for atheris: judge, name, and save each finding raw, never stopping to minimize.

    Invariants: every input runs the candidate once (the fast path's run is the replay's); a finding
    is saved as a raw bundle (``fuzz.report.finding_report.store_finding`` with the input as found) and named on
    stderr, so minimizing it (``gdnfuzz run``'s reducer, the campaign's crash store) happens beside
    the fuzzer; an occurrence whose input is a committed corpus file counts as a replay, not a hit.
    """

    def __init__(self, settings: RunSettings):
        self.settings = settings
        self.candidate = resolve_policy(settings.candidate)
        self.reference = resolve_policy(settings.reference)
        self.hits: Counter[str] = Counter()
        self.committed = {_digest(p.read_bytes()) for d in settings.committed
                          for p in d.glob("*.json") if p.is_file()}
        # The fast path: the reference is skipped when the candidate's run alone shows it has nothing of
        # any class that is counted (a class that compares the two runs can never tell that alone).
        self.decided_alone = [c.decided_by_candidate for c in settings.fail_on.classes]
        # The probe compares every split decision of the candidate's run with the reference's (both split
        # policies, not whole branches): a run without a disagreement is the reference's run too.
        self.probed = self.candidate.checkout is None and self.reference.checkout is None
        self.repeats = Repeats(settings.deadline)
        self.known = KnownBugs(settings.store, settings.crashes)
        self.started = False
        self.in_flight = InFlight(settings.crashes)
        self.execs = 0
        self.execs_said = -math.inf  # when the count was last printed

    def test_one_input(self, data: bytes) -> None:
        """One input, recorded as in flight while it runs (``fuzz.search.in_flight``), then counted."""
        self.in_flight.start(data)
        self._judge(data)
        self.in_flight.done()
        self.execs += 1
        now = time.monotonic()
        if now - self.execs_said >= EXECS_EVERY_S:  # the first verdict, then about once a second
            self.execs_said = now
            print(f"{EXECS_LINE} {self.execs} {tape.FIGURES['taped']} {tape.FIGURES['refused']}", file=sys.stderr,
                  flush=True)

    def _judge(self, data: bytes) -> None:
        if not self.started:
            self.started = True
            print(FIRST_INPUT_LINE, file=sys.stderr, flush=True)
        scenario = decode(data)
        fail_on = self.settings.fail_on
        try:
            run = executor_for("sim").run(scenario, self.candidate, self.reference)
            aim.remember(scenario, run)
            # Reference bugs are found by fuzzing with --candidate vllm.
            if all(decided(run) for decided in self.decided_alone):
                return
            key = cheap_key(run, scenario)
            known = self.repeats.known(key)
            if known is not None:
                self._occurred(known, self.settings.crashes / known, data)
                return
            replayed = replay(scenario, self.candidate, self.reference, "sim", candidate_run=run,
                              reference_run=run if self._same_decisions(run) else None)
        except ConfigRejected:
            return  # an engine config vLLM refuses is not an input, let alone a finding
        except InputError as exc:  # the candidate cannot run here (a checkout unfit for the installed vLLM)
            self.in_flight.done()
            print(f"{UNUSABLE_LINE} {exc}", file=sys.stderr, flush=True)
            os._exit(ExitCode.BAD_INPUT)  # the supervisor ends the run with this line, exit 2: never a finding
        sig = finding_signature(replayed.verdict, scenario, replayed.candidate, fail_on)
        if sig == "clean":
            return
        sig = self.known.fold(sig, scenario, replayed, self.candidate, self.reference) or sig
        self.repeats.learn(key, sig)
        bundle = self.settings.crashes / sig
        if (bundle / "verdict.json").exists():
            self._occurred(sig, bundle, data)
            return
        print(f"{DETECTED_LINE} {sig}", file=sys.stderr, flush=True)
        self.hits[sig] += 1
        finding = Finding(sig, scenario, scenario, replayed.verdict, self.candidate.spec, self.reference.spec,
                          replayed.candidate, reference_run=replayed.reference, fail_on=fail_on)
        bundle = store_finding(finding, self.settings.crashes, None, replay=_digest(data) in self.committed)
        print(f"{FINDING_LINE} {sig} {bundle}", file=sys.stderr, flush=True)

    def _same_decisions(self, run: RunResult) -> bool:
        """Whether the reference's run of this input is ``run`` itself: the probe saw every split decision
        agree, and the run has no fault at all (a split that broke its contract, hung or whose process ended
        gave answers the probe never saw, or none)."""
        return self.probed and run.disagreement is None and not run.faults

    def _occurred(self, sig: str, bundle: Path, data: bytes) -> None:
        """One more occurrence of a signature stored raw in ``bundle`` (counted in batches)."""
        print(f"{DETECTED_LINE} {sig}", file=sys.stderr, flush=True)
        self.hits[sig] += 1
        self.repeats.count(bundle, _digest(data) in self.committed)
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


def starting(what: str) -> None:
    """Say which start-up phase begins (``gdnfuzz run``'s status line shows it until the first input)."""
    print(f"{STARTING_LINE} {what}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> None:
    """The settings' target ``split`` (default): the differential split target; ``kernels``: kernel conformance."""
    import atheris

    settings = RunSettings.from_env()
    exit_when_stuck()  # an input whose run ignores its deadline ends this worker; the parent stores it as a hang
    if settings.target == "kernels":
        with atheris.instrument_imports(include=["workers.kernels"]):
            kernel_conformance_one_input = load(KERNEL_CONFORMANCE_TARGET)
        atheris.Setup(argv, kernel_conformance_one_input)
        atheris.Fuzz()
        return
    fuzz_split(argv, settings, prepare())


def prepare() -> Probes:
    """What every split worker does before its settings matter: vLLM's scheduling code imported and
    instrumented (a warm server, ``fuzz.search.warm_server``, does it once for the workers it forks)."""
    starting("importing vLLM's scheduling code")
    for name in SCHEDULING_MODULES:
        importlib.import_module(name)
    starting("instrumenting it for coverage")
    return instrument(INSTRUMENTED, SCHEDULING_MODULES)


def fuzz_split(argv: list[str], settings: RunSettings, probes: Probes) -> None:
    """Fuzz the split target with ``probes`` counting vLLM's coverage; libFuzzer ends the process."""
    import atheris

    quiet_children()  # this worker's stderr is the supervisor's channel: nothing a candidate prints reaches it
    fork_here(probes.restore)  # vLLM's scheduling code is imported here: a sandbox child forks with it, unprobed
    ambient()  # a user's candidate (or reference) loads and answers in a sandbox child of this worker
    target = FuzzTarget(settings)
    settle_heap()
    starting("loading the corpus")
    if settings.profile == MIXED:
        mixture = Mixture(settings.home, settings.max_steps)
        atheris.Setup(argv, observed(probes, target, mixture), custom_mutator=mixture.mutate,
                      custom_crossover=mixture.crossover)
    else:
        profile = PROFILES[settings.profile]
        atheris.Setup(argv, probes.counted(target.test_one_input),
                      custom_mutator=functools.partial(mutate, max_steps=settings.max_steps, profile=profile),
                      **crossover_hook(profile, settings.max_steps))
    atheris.Fuzz()


def observed(probes: Probes, target: FuzzTarget, mixture: Mixture) -> Callable[[bytes], None]:
    """``test_one_input`` with its coverage counted, and each input's seconds, new features and new
    signatures of the candidate's own credited to the profile that made it (vLLM's own bugs, found under
    any candidate, are no reason to lean anywhere); the profiles' figures printed about once a second
    (:data:`PROFILES_LINE`)."""
    counted = probes.counted(target.test_one_input)
    novelty = Novelty(probes.size)
    said = -math.inf

    def one_input(data: bytes) -> None:
        nonlocal said
        known = len(target.hits)
        started = time.perf_counter()
        counted(data)
        seconds = time.perf_counter() - started
        new = [sig for sig in list(target.hits)[known:] if not reference_is_wrong(sig)]
        mixture.observe(data, seconds, novelty.new_features(probes.counts), len(new))
        now = time.monotonic()
        if now - said >= EXECS_EVERY_S:
            said = now
            print(f"{PROFILES_LINE} {mixture.line()}", file=sys.stderr, flush=True)

    return one_input


def crossover_hook(profile: Profile, max_steps: int) -> dict[str, Callable[..., bytes]]:
    """libFuzzer's crossover hook, under the prefill profile only (the mixture's crosses prefill-sized
    parents only: ``Mixture.crossover``). With a custom crossover, libFuzzer alternates it with the
    custom mutator; under a deep profile each crossover appends a second long conversation (doubling the
    input's steps) and carries none of the profile's deep mutations, and mutation alone reaches the deep
    states far more often (the resumed re-prefill mutant of ``bench/time_to_find.py --deep``, chat
    profile, two 120 s runs each: the candidate's findings came in 25 of 1,806 executions without
    crossover, in 1 of 1,667 with it)."""
    if profile.deep:
        return {}
    return {"custom_crossover": functools.partial(crossover, max_steps=max_steps)}


if __name__ == "__main__":
    main(sys.argv)
