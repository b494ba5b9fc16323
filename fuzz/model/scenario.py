"""The scenario: one test input, in a versioned, validated, canonical JSON form.

A scenario fixes everything an executor needs to run it deterministically:
the engine knobs (under the top-level key ``engine``) and the requests (the
top-level list ``requests``). Token ids are not stored; they are derived from
``seed`` and the prompt parts, so two requests that name the same shared
segment get byte-identical prefixes and the prefix cache can hit.

Invariants kept here:
- ``Scenario.from_dict(s.to_dict()) == s`` and ``canonical_json`` is a
  function of the scenario's value alone (sorted keys, defaults filled in), so
  equal scenarios encode to equal bytes and hash to equal ids.
- Every validation failure raises :class:`ScenarioError` naming the field
  path (``requests[2].max_tokens``) and, when loaded from disk, the file.
  Nothing from deep inside vLLM ever reaches the user for a malformed input.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from fuzz.errors import FieldError
from fuzz.model import json_input
from fuzz.model.knobs import EngineKnobs, engine_to_dict, parse_engine
from fuzz.model.result import VerdictStatus

FORMAT_VERSION = 1
FORMAT_KEY = "gdnfuzz_scenario"
VOCAB_SIZE = 32_000
MAX_CONTEXT = 16_384  # tokens: the tiny hybrid model's context (max_position_embeddings), on every tier
# Keys a corpus file may carry beside the scenario itself; they never change
# what the scenario computes.
ANNOTATION_KEYS = ("expect", "note", "origin")


class ScenarioError(FieldError):
    """A scenario that cannot be run, with the field (and file) at fault."""

    def in_file(self, file: str | Path) -> ScenarioError:
        return ScenarioError(self.field_path, self.message, str(file))


@dataclass(frozen=True)
class Request:
    """One request. ``prompt`` parts: a segment name (str) or a fresh tail length (int).

    ``continues`` names an earlier request: this prompt is that request's prompt,
    then its output tokens, then this request's own parts (a multi-turn
    follow-up). Such a request arrives no earlier than the step after its parent
    finished. ``accept`` gives, per speculative verification step (cycled), how
    many draft tokens the target model accepts; empty means all.
    ``external_tokens`` is the number of prompt tokens a KV connector holds for this
    request (attention KV and the Mamba state at that position, as a disaggregated
    prefill node or a CPU offload tier would); the connector offers them rounded down
    to the attention block size, beyond what the local prefix cache already has.
    """

    id: str
    prompt: tuple[str | int, ...]
    arrival_step: int = 0
    max_tokens: int = 4
    abort_step: int | None = None
    continues: str | None = None
    accept: tuple[int, ...] = ()
    external_tokens: int = 0


@dataclass(frozen=True)
class Scenario:
    engine: EngineKnobs
    segments: Mapping[str, int]
    requests: tuple[Request, ...]
    seed: int = 0

    def __hash__(self) -> int:
        return hash(canonical_json(self))

    def to_dict(self) -> dict[str, Any]:
        return {
            FORMAT_KEY: FORMAT_VERSION,
            "seed": self.seed,
            "engine": engine_to_dict(self.engine),
            "segments": dict(sorted(self.segments.items())),
            "requests": [_request_to_dict(r) for r in self.requests],
        }

    @classmethod
    def from_dict(cls, data: Any) -> Scenario:
        return _parse_scenario(data)

    def scenario_id(self) -> str:
        """Content id: the first 16 hex digits of the canonical encoding's SHA-256."""
        return hashlib.sha256(canonical_json(self).encode()).hexdigest()[:16]

    @functools.cached_property
    def _canonical_json(self) -> str:
        """Computed once: a scenario is immutable (frozen, and nothing edits its segments in place)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def with_engine(self, **changes: Any) -> Scenario:
        return replace(self, engine=replace(self.engine, **changes))

    def request(self, request_id: str) -> Request:
        for r in self.requests:
            if r.id == request_id:
                return r
        raise KeyError(request_id)


def _request_to_dict(r: Request) -> dict[str, Any]:
    d = asdict(r)
    d["prompt"] = list(r.prompt)
    d["accept"] = list(r.accept)
    return d


def canonical_json(scenario: Scenario) -> str:
    """The canonical compact encoding: the fuzzer's input bytes and the id's preimage."""
    return scenario._canonical_json


def pretty_json(scenario: Scenario, annotations: Mapping[str, Any] | None = None) -> str:
    """Human-readable file form; ``annotations`` (e.g. ``expect``) sit beside the scenario."""
    data = scenario.to_dict()
    data.update(annotations or {})
    return json.dumps(data, sort_keys=True, indent=1) + "\n"


# ---------------------------------------------------------------- tokens


@functools.lru_cache(maxsize=8192)
def tokens_for(seed: int, key: str, length: int) -> tuple[int, ...]:
    """``length`` token ids derived from ``(seed, key)``: stable across runs and machines.

    Each blake2b digest of ``seed/key/counter`` gives 16 tokens (little-endian 32-bit words, mapped
    onto 1..VOCAB_SIZE-1). Cached: a segment is shared by requests and by both sides of a verdict,
    and a mutated input keeps most of its parent's parts."""
    words: list[int] = []
    for counter in range(-(-length // 16)):
        words += _WORDS.unpack(hashlib.blake2b(f"{seed}/{key}/{counter}".encode(), digest_size=64).digest())
    return tuple([w % (VOCAB_SIZE - 1) + 1 for w in words[:length]])


_WORDS = struct.Struct("<16I")


def own_prompt_tokens(scenario: Scenario, request: Request) -> list[int]:
    """The tokens of ``request``'s own prompt parts (without a parent's conversation)."""
    tokens: list[int] = []
    for index, part in enumerate(request.prompt):
        if isinstance(part, str):
            tokens += tokens_for(scenario.seed, f"segment:{part}", scenario.segments[part])
        else:
            tokens += tokens_for(scenario.seed, f"tail:{request.id}:{index}", part)
    return tokens


# ---------------------------------------------------------------- parsing


def read_json(path: str | Path) -> Any:
    """A JSON file's value (``fuzz.model.json_input``); any bad file raises ScenarioError naming it."""
    return json_input.read_json(path, lambda field, message: ScenarioError(field, message, str(path)))


def load_scenario(path: str | Path) -> tuple[Scenario, dict[str, Any]]:
    """Read a scenario file; returns the scenario and its checked annotations (``expect``, ...)."""
    path = Path(path)
    data = read_json(path)
    try:
        scenario = _parse_scenario(data)
        annotations = parse_annotations(data)
    except ScenarioError as exc:
        raise exc.in_file(path) from None
    return scenario, annotations


def parse_annotations(data: Mapping[str, Any]) -> dict[str, Any]:
    """The annotations beside a scenario: ``expect`` maps policy specs to verdict statuses
    (``fuzz.model.result.VerdictStatus`` values), ``note`` and ``origin`` are one-line strings."""
    annotations = {k: data[k] for k in ANNOTATION_KEYS if k in data}
    expect = annotations.get("expect", {})
    if not isinstance(expect, Mapping):
        raise ScenarioError("expect", f"expected an object of policy: status, got {type(expect).__name__}")
    statuses = [s.value for s in VerdictStatus]
    for policy, status in expect.items():
        if status not in statuses:
            raise ScenarioError(f"expect.{policy}", f"{status!r} is not one of {', '.join(statuses)}")
    for key in ("note", "origin"):
        if key in annotations and not isinstance(annotations[key], str):
            raise ScenarioError(key, f"expected a string, got {type(annotations[key]).__name__}")
    return annotations


def _int(data: Mapping[str, Any], key: str, where: str, default: Any, lo: int, hi: int) -> Any:
    value = data.get(key, default)
    if value is None and default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScenarioError(f"{where}{key}", f"expected an integer, got {value!r}")
    if not lo <= value <= hi:
        raise ScenarioError(f"{where}{key}", f"{value} is outside [{lo}, {hi}]")
    return value


def _reject_unknown(data: Mapping[str, Any], allowed: set[str], where: str) -> None:
    for key in data:
        if key not in allowed:
            raise ScenarioError(f"{where}{key}", "unknown field")


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ScenarioError(where or "<top>", f"expected a JSON object, got {type(value).__name__}")
    return value


MAX_TOKENS_IN_PROMPT = 65_536
REQUEST_ID_RE = re.compile(r"(?=.*[A-Za-z0-9])[A-Za-z0-9_-]{1,64}")


def _parse_engine(data: Any) -> EngineKnobs:
    return parse_engine(_object(data, "engine"), lambda knob, message: ScenarioError(f"engine.{knob}", message))


def _parse_prompt(value: Any, where: str, segments: Mapping[str, int]) -> tuple[str | int, ...]:
    if not isinstance(value, list):
        raise ScenarioError(where, "expected a list of segment names and tail lengths")
    parts: list[str | int] = []
    for i, part in enumerate(value):
        if isinstance(part, str):
            if part not in segments:
                raise ScenarioError(f"{where}[{i}]", f"unknown segment {part!r}")
        elif isinstance(part, bool) or not isinstance(part, int) or not 1 <= part <= MAX_TOKENS_IN_PROMPT:
            raise ScenarioError(f"{where}[{i}]", f"expected a segment name or a length in [1, {MAX_TOKENS_IN_PROMPT}]")
        parts.append(part)
    return tuple(parts)


def _parse_request(data: Any, index: int, segments: Mapping[str, int], known: set[str]) -> Request:
    w = f"requests[{index}]."
    data = _object(data, w[:-1])
    _reject_unknown(data, set(Request.__dataclass_fields__), w)
    rid = data.get("id")
    if not isinstance(rid, str) or not REQUEST_ID_RE.fullmatch(rid):
        raise ScenarioError(f"{w}id", f"expected a short ASCII alphanumeric name (- and _ allowed), got {rid!r}")
    if rid in known:
        raise ScenarioError(f"{w}id", f"duplicate request id {rid!r}")
    continues = data.get("continues")
    if continues is not None and (not isinstance(continues, str) or continues not in known):
        raise ScenarioError(f"{w}continues", f"{continues!r} is not an earlier request")
    prompt = _parse_prompt(data.get("prompt", []), f"{w}prompt", segments)
    if not prompt and continues is None:
        raise ScenarioError(f"{w}prompt", "a request needs at least one prompt part")
    accept = data.get("accept", [])
    if not isinstance(accept, list) or any(
        isinstance(a, bool) or not isinstance(a, int) or not 0 <= a <= 8 for a in accept
    ):
        raise ScenarioError(f"{w}accept", "expected a list of integers in [0, 8]")
    arrival = _int(data, "arrival_step", w, 0, 0, 10_000)
    abort = _int(data, "abort_step", w, None, 0, 10_000)
    if abort is not None and abort < arrival:
        raise ScenarioError(f"{w}abort_step", f"{abort} is before arrival_step {arrival}")
    return Request(
        id=rid,
        prompt=prompt,
        arrival_step=arrival,
        max_tokens=_int(data, "max_tokens", w, 4, 1, 4096),
        abort_step=abort,
        continues=continues,
        accept=tuple(accept),
        external_tokens=_int(data, "external_tokens", w, 0, 0, MAX_TOKENS_IN_PROMPT),
    )


def _parse_scenario(data: Any) -> Scenario:
    data = _object(data, "")
    version = data.get(FORMAT_KEY)
    if type(version) is not int or version != FORMAT_VERSION:
        raise ScenarioError(FORMAT_KEY, f"expected format version {FORMAT_VERSION}, got {version!r}")
    _reject_unknown(data, {FORMAT_KEY, "seed", "engine", "segments", "requests", *ANNOTATION_KEYS}, "")
    seed = _int(data, "seed", "", 0, 0, (1 << 63) - 1)
    engine = _parse_engine(data.get("engine", {}))
    raw_segments = _object(data.get("segments", {}), "segments")
    segments: dict[str, int] = {}
    for name in raw_segments:
        if not isinstance(name, str) or not name:
            raise ScenarioError("segments", f"bad segment name {name!r}")
        segments[name] = _int(raw_segments, name, "segments.", None, 1, MAX_TOKENS_IN_PROMPT)
        if segments[name] is None:
            raise ScenarioError(f"segments.{name}", "expected a length")
    raw_requests = data.get("requests")
    if not isinstance(raw_requests, list) or not raw_requests:
        raise ScenarioError("requests", "expected a non-empty list of requests")
    if len(raw_requests) > 64:
        raise ScenarioError("requests", f"{len(raw_requests)} requests; at most 64")
    known: set[str] = set()
    requests: list[Request] = []
    for i, raw in enumerate(raw_requests):
        request = _parse_request(raw, i, segments, known)
        known.add(request.id)
        requests.append(request)
    scenario = Scenario(engine=engine, segments=segments, requests=tuple(requests), seed=seed)
    _check_context(scenario)
    return scenario


# ---------------------------------------------------------------- the conversation


def own_prompt_length(scenario: Scenario, request: Request) -> int:
    """``len(own_prompt_tokens(scenario, request))``, without making the tokens."""
    return sum(scenario.segments[p] if isinstance(p, str) else p for p in request.prompt)


def prompt_tokens(scenario: Scenario, request: Request, said: Mapping[str, Sequence[int]]) -> list[int]:
    """The prompt ``request`` is sent: for a follow-up (``continues``), its parent's prompt, then what
    the parent said (``said[parent id]``, its output tokens), then its own parts. Every tier builds a
    request's prompt here, so they all send the same tokens."""
    head: list[int] = []
    if request.continues is not None:
        parent = scenario.request(request.continues)
        head = prompt_tokens(scenario, parent, said) + list(said[parent.id])
    return head + own_prompt_tokens(scenario, request)


def prompt_lengths(scenario: Scenario) -> dict[str, int]:
    """Each request's longest prompt: a parent's prompt and all its ``max_tokens`` outputs, then its own parts."""
    lengths: dict[str, int] = {}
    for r in scenario.requests:  # parents come first: validation ensures it
        head = lengths[r.continues] + scenario.request(r.continues).max_tokens if r.continues else 0
        lengths[r.id] = head + own_prompt_length(scenario, r)
    return lengths


def conversation_lengths(scenario: Scenario) -> dict[str, int]:
    """The most tokens each request can hold: its longest prompt, its max_tokens, and one verify step's drafts."""
    extra = scenario.engine.num_spec_tokens + 1
    return {rid: n + scenario.request(rid).max_tokens + extra for rid, n in prompt_lengths(scenario).items()}


def required_kv_blocks(scenario: Scenario) -> int:
    """Blocks the largest request (all its turns, drafts included) needs alone: attention blocks
    for every token, the Mamba columns align mode keeps live (running, previous, speculative), and
    the two a partial hit holds while its copy-on-write runs (source and copy). vLLM itself sizes
    the pool for a whole max_model_len request; a pool below this is not a configuration it runs."""
    e = scenario.engine
    longest = max(conversation_lengths(scenario).values())
    return -(-longest // e.block_size) + 3 + e.num_spec_tokens + 2


def _check_context(scenario: Scenario) -> None:
    for i, (rid, n) in enumerate(conversation_lengths(scenario).items()):
        if n > MAX_CONTEXT:
            raise ScenarioError(f"requests[{i}]", f"{rid} can reach {n} tokens, beyond the {MAX_CONTEXT}-token context")


def scenario_summary(s: Scenario) -> dict[str, int]:
    """Size measures the minimizer and reports speak of."""
    return {
        "requests": len(s.requests),
        "prompt_tokens": sum(own_prompt_length(s, r) for r in s.requests),
    }


__all__ = [
    "Request",
    "Scenario",
    "ScenarioError",
    "canonical_json",
    "load_scenario",
    "own_prompt_tokens",
    "pretty_json",
    "tokens_for",
]
