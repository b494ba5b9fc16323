"""The run loop around the harness: the deadline, the reducer, and what a user sees (no timing asserted).

`tests/test_harness.py` runs a whole `gdnfuzz run`; these check the pieces it relies on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import seed_case

from fuzz.model.policies import resolve_policy
from fuzz.model.scenario import load_scenario
from fuzz.oracle.differential import replay
from fuzz.oracle.finding import Finding
from fuzz.oracle.verdict import FailOn, finding_signature
from fuzz.report.finding_report import store_finding
from fuzz.search.libfuzzer import DETECTED_LINE, FINDING_LINE, SAVED_LINE, UNUSABLE_LINE, Progress
from fuzz.search.reducer import reduce_one
from fuzz.search.settings import RunSettings
from fuzz.search.supervisor import RunClock, interrupt_ends, stop_at_deadline, sync_signature_counts
from fuzz.store.bundle import count_occurrence, load_bundle


def _sleeper(ignore_term: bool) -> subprocess.Popen[str]:
    code = "import signal, time\n" + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
    return subprocess.Popen([sys.executable, "-c", code + "print('up', flush=True)\ntime.sleep(600)"],
                            stdout=subprocess.PIPE, text=True)


def test_the_deadline_stops_workers_even_one_that_ignores_sigterm():
    polite, stubborn = _sleeper(False), _sleeper(True)
    for proc in (polite, stubborn):
        assert proc.stdout.readline().strip() == "up"  # its signal disposition is set
    stop_at_deadline([polite, stubborn], grace=0.5)
    assert polite.poll() is not None and stubborn.poll() is not None


@pytest.fixture
def interruptible():
    """SIGINT as a terminal delivers it: a session started in the background (nohup, ``cmd &`` in a script)
    inherits it ignored, which ``interrupt_ends`` leaves alone, as Python itself does."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_first_interrupt_ends_the_run_as_its_deadline_does_and_a_second_is_keyboard_interrupt(interruptible):
    clock = RunClock(Progress(), max_time=300, from_first_verdict=False, stop_by=None)
    assert clock.deadline() > time.time() + 200
    with interrupt_ends(clock):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)  # the handler runs in this (the main) thread
        assert clock.interrupted and clock.deadline() <= time.time()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_fuzzing_time_counted_from_the_first_verdict_and_never_past_the_bound():
    progress = Progress()
    clock = RunClock(progress, max_time=20, from_first_verdict=True, stop_by=None)
    assert clock.deadline() is None and clock.worker_limit() is None  # the supervisor holds the budget
    progress.first_input, progress.first_verdict = 12.0, 30.0  # a worker's start-up, then a candidate process's
    assert abs(clock.deadline() - (clock.started + 50)) < 1e-6
    bounded = RunClock(progress, max_time=20, from_first_verdict=True, stop_by=clock.started + 25)
    assert bounded.deadline() == clock.started + 25


def test_one_announcement_per_signature_and_repeats_in_the_status_line():
    progress = Progress()
    for _ in range(3):
        progress.feed(0, f"{DETECTED_LINE} sig-a")
        progress.feed(0, f"{FINDING_LINE} sig-a /raw/worker-0/sig-a")
    progress.feed(1, f"{FINDING_LINE} sig-b /raw/worker-1/sig-b")
    first = progress.take_announcements()
    assert [line.split()[2] for line in first] == ["sig-a", "sig-b"]
    progress.feed(0, f"{FINDING_LINE} sig-a /raw/worker-0/sig-a")
    progress.feed(-1, f"{SAVED_LINE} sig-a /crashes/sig-a")
    assert progress.take_announcements() == []
    assert "signatures 2 (repeats 3)" in progress.line()
    assert progress.first_raw_bundles() == [("sig-a", "/raw/worker-0/sig-a"), ("sig-b", "/raw/worker-1/sig-b")]


def test_a_worker_stopped_on_bad_input_ends_the_run_with_its_first_reason():
    """A checkout unfit for the installed vLLM: the worker prints why and exits 2; the run says it, no finding."""
    progress = Progress()
    progress.feed(0, f"{UNUSABLE_LINE} branch:/x: vllm/v1/core/sched/scheduler.py:342 needs VllmConfig.a, which ...")
    progress.feed(1, f"{UNUSABLE_LINE} a later reason")
    assert progress.unusable == "branch:/x: vllm/v1/core/sched/scheduler.py:342 needs VllmConfig.a, which ..."
    assert progress.findings == [] and progress.worker_crashes == 0


def _stored_finding(store):
    """The seed case's finding (pre-51113 against vllm), unminimized, stored under ``store``."""
    scenario, _ = load_scenario(seed_case())
    candidate, reference = resolve_policy("pre-51113"), resolve_policy("vllm")
    found = replay(scenario, candidate, reference)
    sig = finding_signature(found.verdict, scenario, found.candidate, FailOn("correctness"))
    finding = Finding(sig, scenario, scenario, found.verdict, candidate.spec, reference.spec, found.candidate,
                      reference_run=found.reference)
    return sig, store_finding(finding, store, None)


def test_the_reducer_past_its_deadline_stores_the_finding_as_found(tmp_path):
    sig, raw = _stored_finding(tmp_path / "crashes" / "raw" / "worker-0")
    settings = RunSettings(candidate="pre-51113", reference="vllm", corpus=tmp_path, crashes=tmp_path / "crashes",
                           write_regressions=True)
    bundle = reduce_one(sig, raw, settings, seconds=0.0)
    stored = load_bundle(bundle)
    assert stored.scenario == stored.original  # no time to minimize: nothing is lost, nothing is changed
    assert (tmp_path / "regressions" / f"{sig}.json").exists()


def test_hits_count_discoveries_and_replays_count_committed_inputs(tmp_path):
    crashes = tmp_path / "crashes"
    sig, raw0 = _stored_finding(crashes / "raw" / "worker-0")
    _, raw1 = _stored_finding(crashes / "raw" / "worker-1")
    count_occurrence(raw0)  # worker 0: a second discovery
    count_occurrence(raw1, replay=True)  # worker 1: a committed regression run again
    assert (load_bundle(raw0).verdict["hits"], load_bundle(raw0).verdict["replays"]) == (2, 0)
    _stored_finding(crashes)  # the signature's own bundle, crashes/<sig>/
    sync_signature_counts(crashes, {sig})
    verdict = load_bundle(crashes / sig).verdict
    assert (verdict["hits"], verdict["replays"]) == (3, 1)
