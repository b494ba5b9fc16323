"""A sandboxed split's run answered from its child's tape (``fuzz.sandbox.tape``): a matching tape gives the
in-process run's result; a tape the candidate tampers with, or a child that misbehaves mid-tape, is refused and
the run is the per-call run's, never a clean verdict by itself."""

from __future__ import annotations

import json
import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fuzz.errors import ConfigRejected
from fuzz.model.deadline import DEADLINE_ENV
from fuzz.model.decision import asking_what_if
from fuzz.model.policies import resolve_policy
from fuzz.sandbox import tape
from fuzz.sandbox.channel import JsonChild
from fuzz.sandbox.scope import deciding
from fuzz.search.generate import random_scenario
from fuzz.search.profiles import PROFILES

HOSTILE = Path(__file__).with_name("tape_policies.py")
COPY_OF_VLLM = "from fuzz.model.policies import BUILTINS\ndef split(*args):\n    return BUILTINS['vllm'][0](*args)\n"


def _calls(sim, scenario) -> int:
    count = [0]
    vllm = resolve_policy("vllm")

    def counted(*args):
        count[0] += 1
        return vllm.split(*args)

    sim.run(scenario, replace(vllm, split=counted))
    return count[0]


@pytest.fixture(scope="module")
def scenario(sim):
    """The first generated chat scenario vLLM accepts whose run makes at least 8 split calls."""
    rng = random.Random(5)
    while True:
        candidate = random_scenario(rng, PROFILES["chat"])
        try:
            if _calls(sim, candidate) >= 8:
                return candidate
        except ConfigRejected:
            continue


def _same(a, b, but: str = "policy") -> bool:
    left, right = a.to_dict(), b.to_dict()
    for key in {"policy", but}:
        left.pop(key), right.pop(key)
    return left == right


def _taped_and_per_call(sim, spec, scenario):
    """The run as every sandboxed run is made (taped), the per-call run, and how many tapes were refused."""
    with deciding():
        policy, reference = resolve_policy(spec), resolve_policy("vllm")
        refused = tape.FIGURES["refused"]
        taped = sim.run(scenario, policy, reference)
        refused = tape.FIGURES["refused"] - refused
        per_call = sim._run(scenario, policy, reference)  # one exchange a call: the run a refusal makes
    return taped, per_call, refused


def test_a_matching_tape_is_used_and_gives_the_in_process_result(sim, scenario, tmp_path):
    path = tmp_path / "copy.py"
    path.write_text(COPY_OF_VLLM)
    used = tape.FIGURES["taped"]
    taped, per_call, refused = _taped_and_per_call(sim, f"{path}:split", scenario)
    assert refused == 0 and tape.FIGURES["taped"] == used + 1
    assert _same(taped, per_call) and _same(taped, sim.run(scenario, resolve_policy("vllm")))


@pytest.mark.parametrize(("name", "why"), [
    ("changes_its_scheduler", "the candidate"), ("changes_its_request", "the candidate"),
    ("tape_for_calls_not_made", ""), ("truncated_tape", "the tape ends after 2 entries"),
    ("miscounted_tape", "the tape says 7 entries and sent 2"), ("oversized_tape", "KiB"),
    ("wrong_digests", "another state than the run's"), ("exits_mid_tape", "exited (exit code 3)"),
    ("answers_two_ways", "two ways"), ("breaks_its_run", "its child's run ended early: AttributeError"),
])
def test_a_tampered_tape_is_refused_and_the_run_is_the_per_call_runs(sim, scenario, name, why):
    taped, per_call, refused = _taped_and_per_call(sim, f"{HOSTILE}:{name}", scenario)
    assert refused == 1, f"{name}: the tape was used"
    assert why in tape.REFUSALS[-1].reason
    assert _same(taped, per_call)


def test_a_child_that_stalls_mid_tape_is_refused_at_the_deadline(sim, scenario, monkeypatch):
    monkeypatch.setenv(DEADLINE_ENV, "3")
    taped, per_call, refused = _taped_and_per_call(sim, f"{HOSTILE}:stalls_mid_tape", scenario)
    assert refused == 1 and "late" in tape.REFUSALS[-1].reason
    assert _same(taped, per_call) and not taped.faults


@pytest.mark.parametrize("name", ["random_answers", "time_answers"])
def test_nondeterministic_answers_are_judged_on_the_answers_the_run_was_given(sim, name, monkeypatch):
    """A candidate that answers at random is judged on the answers its process gave the deciding run's calls:
    the verdict is the in-process run's on exactly those answers."""
    runs: list[tape.TapedRun] = []
    result = tape.TapedRun.result
    monkeypatch.setattr(tape.TapedRun, "result", lambda self, run: runs.append(self) or result(self, run))
    rng = random.Random(11)
    judged = 0
    with deciding():
        policy, reference = resolve_policy(f"{HOSTILE}:{name}"), resolve_policy("vllm")
        while judged < 4:
            scenario = random_scenario(rng, PROFILES["prefill"])
            try:
                taped = sim.run(scenario, policy, reference)
            except ConfigRejected:
                continue
            judged += 1
            assert runs[-1].refusal is None and runs[-1].used > 0
            answers = iter([entry[2]["value"] for entry in runs[-1].entries])

            def replay(*_, answers=answers):
                return 0 if asking_what_if() else next(answers)

            replayed = sim.run(scenario, replace(policy, split=replay), reference)
            assert _same(taped, replayed, but="disagreement")  # its what-if questions are asked afresh


def test_a_run_vllm_rejects_leaves_no_tape_behind_and_keeps_its_child(sim, scenario, tmp_path):
    path = tmp_path / "copy.py"
    path.write_text(COPY_OF_VLLM)
    rejected = replace(scenario, engine=replace(scenario.engine, num_kv_blocks=1))
    with deciding():
        policy = resolve_policy(f"{path}:split")
        sim.run(scenario, policy)
        child = policy.split.tape_child()
        pid = child.proc.pid
        with pytest.raises(ConfigRejected):
            sim.run(rejected, policy)
        assert child.alive and child.proc.pid == pid  # a minimizer's rejected candidates cost no restart
        refused = tape.FIGURES["refused"]
        assert _same(sim.run(scenario, policy), sim.run(scenario, resolve_policy("vllm")))
        assert tape.FIGURES["refused"] == refused


def test_a_child_answers_for_the_one_policy_it_was_started_for(tmp_path):
    path = tmp_path / "copy.py"
    path.write_text(COPY_OF_VLLM)
    child = JsonChild("fuzz.sandbox.child", [json.dumps(sys.path), f"{path}:split"], 120.0, forked=True)
    try:
        answer = child.call({"op": "resolve", "spec": f"{HOSTILE}:random_answers"}, 120.0)
    finally:
        child.close()
    assert answer["policy"]["source"][0] == str(path)


def test_a_runs_figures_count_its_tapes_and_show_each_refusal():
    from fuzz.search.libfuzzer import Progress

    progress = Progress()
    progress.feed(0, "gdnfuzz-execs 10 7 3")
    progress.feed(1, "gdnfuzz-execs 4")  # a worker of a checkout before tapes
    progress.feed(0, f"{tape.TAPE_REFUSED_LINE} my_split.py:split: call 3: the tape ends")
    totals = progress.totals()
    assert (totals.execs, totals.taped, totals.refused) == (14, 7, 3)
    assert progress.take_announcements() == [f"{tape.TAPE_REFUSED_LINE} my_split.py:split: call 3: the tape ends"]
    assert progress.take_announcements() == []
