"""The one-line messages of the scenario, verdict, stats and kernel schedule readers, word for word.

The readers check their formats with schema types (``fuzz.model.schema``); these messages are the
ones the hand-written checks gave before, and a user's scripts may match them: each case is one
fault in an otherwise valid document."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fuzz.model.scenario import Scenario, ScenarioError, load_scenario
from fuzz.search.reader_targets import SEED_VERDICT, seed_inputs
from fuzz.store.bundle import BundleError, load_verdict
from fuzz.store.stats import StatsError, StatsRow

BASE = {"gdnfuzz_scenario": 1, "engine": {"mamba_block_size": 64}, "segments": {"sys": 70},
        "requests": [{"id": "a", "prompt": ["sys", 5]}, {"id": "b", "prompt": ["sys"], "continues": "a"}]}
MISSING = object()


def _raised(path: Path, data: Any, read: Callable[[Path], Any], error: type[Exception]) -> str:
    """The message of the ``error`` that ``read`` raises on ``data`` written as JSON to ``path``."""
    path.write_text(json.dumps(data))
    with pytest.raises(error) as caught:
        read(path)
    return str(caught.value)


def _patched(base: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(base))
    *head, last = dotted.split(".")
    node = data
    for part in head:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is MISSING:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return data


R0 = "requests.0."
SCENARIO_CASES = [
    ("seed", -1, "seed: -1 is outside [0, 9223372036854775807]"),
    ("seed", "7", "seed: expected an integer, got '7'"),
    ("seed", 1.0, "seed: expected an integer, got 1.0"),
    ("zz", 1, "zz: unknown field"),
    ("gdnfuzz_scenario", True, "gdnfuzz_scenario: expected format version 1, got True"),
    ("segments", [], "segments: expected a JSON object, got list"),
    ("segments.sys", None, "segments.sys: expected a length"),
    ("segments.sys", 0, "segments.sys: 0 is outside [1, 65536]"),
    ("segments.", 3, "segments: bad segment name ''"),
    ("requests", MISSING, "requests: expected a non-empty list of requests"),
    ("requests", {}, "requests: expected a non-empty list of requests"),
    ("requests", [{"id": "a", "prompt": [1]}] * 65, "requests: 65 requests; at most 64"),
    ("requests.0", 3, "requests[0]: expected a JSON object, got int"),
    (R0 + "zz", 1, "requests[0].zz: unknown field"),
    (R0 + "id", MISSING, "requests[0].id: expected a short ASCII alphanumeric name (- and _ allowed), got None"),
    (R0 + "id", "a b", "requests[0].id: expected a short ASCII alphanumeric name (- and _ allowed), got 'a b'"),
    (R0 + "prompt", "sys", "requests[0].prompt: expected a list of segment names and tail lengths"),
    (R0 + "prompt.1", 0, "requests[0].prompt[1]: expected a segment name or a length in [1, 65536]"),
    (R0 + "prompt.1", True, "requests[0].prompt[1]: expected a segment name or a length in [1, 65536]"),
    (R0 + "prompt.1", "nope", "requests[0].prompt[1]: unknown segment 'nope'"),
    (R0 + "prompt", [], "requests[0].prompt: a request needs at least one prompt part"),
    (R0 + "accept", [9], "requests[0].accept: expected a list of integers in [0, 8]"),
    (R0 + "arrival_step", 10_001, "requests[0].arrival_step: 10001 is outside [0, 10000]"),
    (R0 + "max_tokens", False, "requests[0].max_tokens: expected an integer, got False"),
    (R0 + "abort_step", "x", "requests[0].abort_step: expected an integer, got 'x'"),
    (R0 + "external_tokens", 1.5, "requests[0].external_tokens: expected an integer, got 1.5"),
    ("requests.1.continues", 3, "requests[1].continues: 3 is not an earlier request"),
    ("requests.1.id", "a", "requests[1].id: duplicate request id 'a'"),
    ("engine", [], "engine: expected a JSON object, got list"),
    ("engine.block_size", 7, "engine.mamba_block_size: 64 is not a multiple of block_size 7"),
    ("engine.step_budgets", [0], "engine.step_budgets: expected a list of integers in [1, 1048576]"),
    ("engine.shared_prefix_checkpoint", 1, "engine.shared_prefix_checkpoint: expected true or false, got 1"),
    ("engine.bogus", 1, "engine.bogus: unknown field"),
    ("expect", [], "expect: expected an object of policy: status, got list"),
    ("expect", {"vllm": "ok"}, "expect.vllm: 'ok' is not one of clean, diverged, inconclusive, unsupported, regressed, "
                               "nor an object of vLLM version (0.33.0): status"),
    ("origin", None, "origin: expected a string, got NoneType"),
    (R0 + "prompt.0", 60000, "requests[0]: a can reach 60010 tokens, beyond the 16384-token context"),
]


@pytest.mark.parametrize(("dotted", "value", "message"), SCENARIO_CASES, ids=[c[2][:40] for c in SCENARIO_CASES])
def test_scenario_messages(tmp_path, dotted, value, message):
    path = tmp_path / "s.json"
    assert _raised(path, _patched(BASE, dotted, value), load_scenario, ScenarioError) == f"{path}: {message}"


def test_annotations_are_checked_where_a_file_is_loaded_only():
    """``Scenario.from_dict`` takes a fuzzer's input, which carries its corpus file's annotations as they are."""
    assert Scenario.from_dict({**BASE, "expect": "anything", "note": 3}) == Scenario.from_dict(BASE)


VERDICT_CASES = [
    ("kind", MISSING, "kind: missing"),
    ("kind", 3, "kind: expected str, got 3"),
    ("first_step", "4", "first_step: expected int, got '4'"),
    ("signature", "a b", "signature: 'a b' is not a file-name-safe signature"),
    ("summary", "two\nlines", "summary: expected one non-empty line"),
    ("confirmed", "yes", "confirmed: expected one of ('confirmed', 'not confirmed', 'inconclusive', None), got 'yes'"),
    ("environment", {"vllm": "1", "torch": "2"}, "environment.device: expected a string"),
    ("hits", -1, "hits: expected a count, got -1"),
    ("reproducibility", {"tries": 0, "hits": 0}, "reproducibility.tries: expected at least 1, got 0"),
    ("verifications", {"k": {"status": "fixed", "tries": 1, "hits": 2, "candidate": "c"}},
     "verifications.k.hits: expected 0..1 (the tries), got 2"),
    ("verifications", {"k": {"status": "gone", "tries": 1, "hits": 0, "candidate": "c"}},
     "verifications.k.status: expected one of ('reproduces', 'fixed', 'flaky', 'unverifiable'), got 'gone'"),
    ("verifications", {"k": 3}, "verifications.k: expected an object, got 3"),
    ("fixed_in", [], "fixed_in: expected dict or null, got []"),
    ("fixed_in", {"candidate": "c", "revision": 1}, "fixed_in.revision: expected str or null, got 1"),
    ("regression_range", {"first_bad": "a"}, "regression_range.subject: expected str, got None"),
]


@pytest.mark.parametrize(("key", "value", "message"), VERDICT_CASES, ids=[c[2][:40] for c in VERDICT_CASES])
def test_verdict_messages(tmp_path, key, value, message):
    path = tmp_path / "verdict.json"
    assert _raised(path, _patched(SEED_VERDICT, key, value), load_verdict, BundleError) == f"{path}: {message}"


STATS_CASES = [
    ("time", MISSING, "time: missing"),
    ("actor", 3, "actor: expected str, got 3"),
    ("execs", -1, "execs: -1 is outside [0, 9.22337e+18]"),
    ("execs", 2 ** 63, "execs: 9223372036854775808 is outside [0, 9.22337e+18]"),
    ("exec_per_s", 1e16, "exec_per_s: 1e+16 is outside [0, 1e+15]"),
    ("cpus", "2", "cpus: expected float, got '2'"),
    ("cpus", 2 ** 63, "cpus: 9223372036854775808 is outside [0, 9.22337e+18]"),
    ("state", None, "state: expected str, got None"),
    ("nodes", 1.0, "nodes: expected int, got 1.0"),
]


@pytest.mark.parametrize(("key", "value", "message"), STATS_CASES, ids=[c[2][:40] for c in STATS_CASES])
def test_stats_messages(key, value, message):
    with pytest.raises(StatsError) as caught:
        StatsRow.from_dict(_patched({"time": 1.0, "actor": "a"}, key, value), "s.jsonl:3")
    assert str(caught.value) == f"s.jsonl:3: {message}"


def test_a_float_field_keeps_an_integer():
    assert StatsRow.from_dict({"time": 5, "actor": "a"}, "s.jsonl:1").time.__class__ is int


R = "entries[0].result"
SCHEDULE_CASES = [  # one fault in the seed schedule's result (a RunResult)
    ("", 3, f"{R}: expected an object, got a number"),
    ("", None, f"{R}: expected an object, got null"),
    ("zz", 1, f"{R}.zz: unknown field"),
    ("tier", MISSING, f"{R}.tier: missing"),
    ("tier", 3, f"{R}.tier: expected str, got 3"),
    ("status", "bogus", f"{R}.status: expected one of ok, unsupported, got 'bogus'"),
    ("status", "x" * 50, f"{R}.status: expected one of ok, unsupported, got '{'x' * 36}..."),
    ("hashed_mamba_blocks", True, f"{R}.hashed_mamba_blocks: expected int, got True"),
    ("hashed_mamba_blocks", 1.0, f"{R}.hashed_mamba_blocks: expected int, got 1.0"),
    ("steps", "x", f"{R}.steps: expected a list, got a string"),
    ("steps.0", [], f"{R}.steps[0]: expected an object, got a list"),
    ("steps.0.chunks.0.zz", 0, f"{R}.steps[0].chunks[0].zz: unknown field"),
    ("steps.0.chunks.0.request_id", MISSING, f"{R}.steps[0].chunks[0].request_id: missing"),
    ("steps.0.chunks.0.read_block", False, f"{R}.steps[0].chunks[0].read_block: expected int, got False"),
    ("steps.0.chunks.0.write_blocks", None, f"{R}.steps[0].chunks[0].write_blocks: expected a list, got null"),
    ("steps.0.copies.0.1", "a", f"{R}.steps[0].copies[0][1]: expected int, got 'a'"),
    ("steps.0.seconds", True, f"{R}.steps[0].seconds: expected float, got True"),
    ("requests", [], f"{R}.requests: expected an object, got a list"),
    ("requests.a.output_tokens.1", "x", f"{R}.requests.a.output_tokens[1]: expected int, got 'x'"),
    ("requests.b.resume_state_ok", 1, f"{R}.requests.b.resume_state_ok: expected bool, got 1"),
    ("requests.b.top_logprobs", [{"9": "x"}], f"{R}.requests.b.top_logprobs[0].9: expected float, got 'x'"),
    ("faults.0.detail", MISSING, f"{R}.faults[0].detail: missing"),
    ("notes.0", 1, f"{R}.notes[0]: expected str, got 1"),
    ("disagreement", 3, f"{R}.disagreement: expected an object, got a number"),
]


@pytest.mark.parametrize(("dotted", "value", "message"), SCHEDULE_CASES, ids=[c[2][len(R):][:40] for c in SCHEDULE_CASES])
def test_schedule_messages(tmp_path, dotted, value, message):
    from workers.kernels.schedule import read_schedule  # noqa: PLC0415 - a worker's reader

    path = tmp_path / "schedule.json"
    place = "entries.0.result" + (f".{dotted}" if dotted else "")
    seed = json.loads(seed_inputs("schedule")[0])
    assert _raised(path, _patched(seed, place, value), read_schedule, ScenarioError) == f"{path}: {message}"
