"""Finding classes are registered objects: each module of ``fuzz.oracle.classes`` is found, and a new
module is a new class everywhere (``--fail-on``, verdicts, signatures, exit codes) with nothing else changed."""

from __future__ import annotations

import textwrap

import pytest
from conftest import seed_case

import fuzz.oracle.classes
from fuzz.errors import ExitCode
from fuzz.model.policies import resolve_policy
from fuzz.model.scenario import load_scenario
from fuzz.oracle.differential import replay
from fuzz.oracle.verdict import (
    ANY,
    FailOn,
    class_of_signature,
    exit_code_for,
    fail_on_choices,
    finding_classes,
    finding_signature,
)

TOY = '''
from fuzz.errors import ExitCode
from fuzz.model.result import VerdictStatus
from fuzz.oracle.divergence import Divergence
from fuzz.oracle.verdict import FindingClass


class SlowerStart(FindingClass):
    name = "toy-slower-start"
    rank = 5
    description = "a request's first chunk scheduled later than under the reference"
    status = VerdictStatus.REGRESSED
    exit_code = ExitCode.REGRESSED
    signature_prefix = "toy-"
    verdict_key = "toy"
    needs_canary = False
    locates = True
    confirm_on_engine = False
    exact_on_sim = True

    def judge(self, runs):
        return [Divergence("slower-start", "candidate", f"request {rid} started later", rid, o.first_step)
                for rid, o in runs.candidate.requests.items()
                if rid in runs.reference.requests and (o.first_step or 0) > (runs.reference.requests[rid].first_step or 0)]

    def headline(self, findings):
        return findings[0] if findings else None

    def signature(self, verdict, scenario, candidate_run):
        return "toy-slower-start"

    def report_section(self, verdict, scenario, candidate, reference, names):
        return "later", ""


FINDING_CLASS = SlowerStart()
'''


def test_the_registered_classes_are_ordered_and_tell_their_signatures_apart():
    names = [c.name for c in finding_classes()]
    assert names[:2] == ["correctness", "efficiency"]  # the two that ship; rank orders them first
    assert fail_on_choices() == [*names, ANY]
    assert len({c.signature_prefix for c in finding_classes()}) == len(names)
    assert class_of_signature("poison-unaligned-end-past-lcp-eagle-family").name == "correctness"
    assert class_of_signature("efficiency-lost-cache-hit-no-spec").name == "efficiency"
    assert exit_code_for(["efficiency-lost-cache-hit-no-spec"]) == ExitCode.REGRESSED
    assert exit_code_for(["efficiency-lost-cache-hit-no-spec", "liveness-no-spec"]) == ExitCode.DIVERGED
    assert exit_code_for([], worker_crashed=True) == ExitCode.DIVERGED
    assert exit_code_for(["both-side-liveness-no-spec", "reference-side-efficiency-lost-cache-hit"]) == ExitCode.CLEAN
    with pytest.raises(ValueError):
        FailOn("everything")


@pytest.fixture
def toy_class(tmp_path):
    (tmp_path / "toy.py").write_text(textwrap.dedent(TOY))
    fuzz.oracle.classes.__path__.append(str(tmp_path))
    finding_classes.cache_clear()
    yield
    fuzz.oracle.classes.__path__.remove(str(tmp_path))
    finding_classes.cache_clear()


def test_a_new_module_is_a_new_class_everywhere(toy_class):
    assert [c.name for c in finding_classes()][-1] == "toy-slower-start"
    assert "toy-slower-start" in fail_on_choices()
    scenario, _ = load_scenario(seed_case())
    replayed = replay(scenario, resolve_policy("pre-51113"), resolve_policy("vllm"))
    verdict = replayed.verdict
    assert set(verdict.found) == {c.name for c in finding_classes()}
    assert "toy" in verdict.to_dict()
    counted = FailOn("toy-slower-start")
    expected_sig = "toy-slower-start" if verdict.of("toy-slower-start") else "clean"
    assert finding_signature(verdict, scenario, replayed.candidate, counted) == expected_sig
    assert class_of_signature("toy-slower-start").name == "toy-slower-start"
    sig = finding_signature(verdict, scenario, replayed.candidate, FailOn(ANY))
    assert exit_code_for([sig]) == ExitCode.DIVERGED  # correctness still names the verdict
