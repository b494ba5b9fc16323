"""The scenario: one test input (engine knobs and requests), in a versioned, validated, canonical JSON form.
Invariants: ``Scenario.from_dict(s.to_dict()) == s``; equal scenarios give equal canonical bytes and ids; token ids
derive from ``seed``; every validation failure is a :class:`ScenarioError` naming the field (and file)."""

from __future__ import annotations

import functools
import hashlib
import json
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, PlainValidator, Strict, WithJsonSchema, with_config

from fuzz.errors import FieldError
from fuzz.model import json_input, schema
from fuzz.model.knobs import EngineKnobs, engine_json_schema, engine_to_dict, parse_engine
from fuzz.model.result import VerdictStatus
from fuzz.model.schema import Says

FORMAT_VERSION = 1
FORMAT_KEY = "gdnfuzz_scenario"
VOCAB_SIZE = 32_000
MAX_CONTEXT = 16_384  # tokens: the tiny hybrid model's context (max_position_embeddings), on every tier
# Keys a corpus file may carry beside the scenario itself; they never change
# what the scenario computes. ``upstream``: the upstream report of a bug of vLLM's own that the file
# reproduces (an exported suite names it in the case's xfail reason).
ANNOTATION_KEYS = ("expect", "note", "origin", "upstream")


class ScenarioError(FieldError):
    """A scenario that cannot be run, with the field (and file) at fault."""

    def in_file(self, file: str | Path) -> ScenarioError:
        return ScenarioError(self.field_path, self.message, str(file))


MAX_TOKENS_IN_PROMPT = 65_536
MAX_REQUESTS = 64
REQUEST_ID_PATTERN = r"^[A-Za-z0-9_-]*[A-Za-z0-9][A-Za-z0-9_-]*$"  # 1 to 64 of these, one of them alphanumeric


def _kind(value: Any) -> str:
    return type(value).__name__


def _int_message(lo: int, hi: int) -> Callable[[Any], str]:
    return lambda v: f"{v} is outside [{lo}, {hi}]" if type(v) is int else f"expected an integer, got {v!r}"


def Int(lo: int, hi: int) -> Any:  # noqa: N802 - a type
    """An integer field in ``[lo, hi]``, as the scenario format words its faults."""
    return Annotated[int, Strict(), Field(ge=lo, le=hi), Says(_int_message(lo, hi))]


def _object_says(label: str = "a JSON object") -> Says:
    return Says(lambda v: f"expected {label}, got {_kind(v)}")


PromptPart = Annotated[Annotated[str, Strict()] | Annotated[int, Strict(), Field(ge=1, le=MAX_TOKENS_IN_PROMPT)],
                       Says(lambda v: f"expected a segment name or a length in [1, {MAX_TOKENS_IN_PROMPT}]")]
# Types named here, not in a class's annotations: a lambda there would not see this module's names.
Prompt = Annotated[tuple[PromptPart, ...], Says(lambda v: "expected a list of segment names and tail lengths")]
RequestId = Annotated[str, Strict(), Field(pattern=REQUEST_ID_PATTERN, max_length=64), Says(
    lambda v: f"expected a short ASCII alphanumeric name (- and _ allowed), got {v!r}", missing=True)]
Continues = Annotated[Annotated[str, Strict()] | None, Says(lambda v: f"{v!r} is not an earlier request")]
Accept = Annotated[tuple[Annotated[int, Strict(), Field(ge=0, le=8)], ...],
                   Says(lambda v: "expected a list of integers in [0, 8]")]


@with_config(ConfigDict(extra="forbid"))
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
    The field types are the file format's (``ScenarioFile``).
    """

    id: RequestId
    prompt: Prompt = ()
    arrival_step: Int(0, 10_000) = 0
    max_tokens: Int(1, 4096) = 4
    abort_step: Int(0, 10_000) | None = None
    continues: Continues = None
    accept: Accept = ()
    external_tokens: Int(0, MAX_TOKENS_IN_PROMPT) = 0


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
    """``length`` token ids in ``[1, VOCAB_SIZE)`` derived from ``(seed, key)``: stable across runs and machines."""
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
        scenario = _parse_scenario(data, ScenarioFile)
    except ScenarioError as exc:
        raise exc.in_file(path) from None
    return scenario, {k: data[k] for k in ANNOTATION_KEYS if k in data}


def _engine(value: Any) -> EngineKnobs:
    if not isinstance(value, Mapping):
        raise ScenarioError("", f"expected a JSON object, got {_kind(value)}")
    return parse_engine(value, ScenarioError)


Engine = Annotated[EngineKnobs, PlainValidator(_engine), WithJsonSchema(engine_json_schema())]
SegmentName = Annotated[str, Field(min_length=1), Says(lambda name: f"bad segment name {name!r}")]
SegmentLength = Annotated[int, Strict(), Field(ge=1, le=MAX_TOKENS_IN_PROMPT), Says(
    lambda v: "expected a length" if v is None else _int_message(1, MAX_TOKENS_IN_PROMPT)(v))]
Requests = Annotated[tuple[Annotated[Request, _object_says()], ...], Field(min_length=1, max_length=MAX_REQUESTS), Says(
    lambda v: f"{len(v)} requests; at most {MAX_REQUESTS}" if isinstance(v, list) and len(v) > MAX_REQUESTS
    else "expected a non-empty list of requests", missing=True)]
_STATUSES = ", ".join(s.value for s in VerdictStatus)
# A policy's expected verdict: one status on every vLLM, or per vLLM version, each holding from that version on
# (``fuzz.model.expectations``).
VllmVersion = Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)*$")]
Expect = Annotated[dict[str, Annotated[VerdictStatus | dict[VllmVersion, VerdictStatus], Says(
    lambda v: f"{v!r} is not one of {_STATUSES}, nor an object of vLLM version (0.33.0): status")]],
                   _object_says("an object of policy: status")]
Text = Annotated[str, Strict(), Says(lambda v: f"expected a string, got {_kind(v)}")]


@with_config(ConfigDict(extra="forbid"))
@dataclass(frozen=True, kw_only=True)
class ScenarioFields:
    """A scenario's value as ``Scenario.from_dict`` takes it; annotations may sit beside it unchecked."""

    gdnfuzz_scenario: Literal[1]  # FORMAT_VERSION
    seed: Int(0, (1 << 63) - 1) = 0
    engine: Engine = field(default_factory=EngineKnobs)
    segments: Annotated[dict[SegmentName, SegmentLength], _object_says()] = field(default_factory=dict)
    requests: Requests
    expect: Any = None
    note: Any = None
    origin: Any = None
    upstream: Any = None


@with_config(ConfigDict(extra="forbid", title="gdnfuzz scenario"))
@dataclass(frozen=True, kw_only=True)
class ScenarioFile(ScenarioFields):
    """A scenario file as :func:`load_scenario` reads it: the scenario and its annotations (the published
    JSON Schema, :data:`SCHEMA_FILE`). ``expect`` maps policy specs to verdict statuses (or, where a vLLM
    release changed it, to an object of ``version: status``, each from that version on:
    ``fuzz.model.expectations``); ``note``, ``origin`` and ``upstream`` are one-line strings."""

    expect: Expect = field(default_factory=dict)
    note: Text = None  # type: ignore[assignment]  # absent: no note (null is refused)
    origin: Text = None  # type: ignore[assignment]
    upstream: Text = None  # type: ignore[assignment]


def _parse_scenario(data: Any, form: type[ScenarioFields] = ScenarioFields) -> Scenario:
    """The scenario of a value of ``form``: format version checked first, then the schema, then cross-references."""
    if not isinstance(data, Mapping):
        raise ScenarioError("<top>", f"expected a JSON object, got {_kind(data)}")
    version = data.get(FORMAT_KEY)
    if type(version) is not int or version != FORMAT_VERSION:
        raise ScenarioError(FORMAT_KEY, f"expected format version {FORMAT_VERSION}, got {version!r}")
    file = schema.validate(form, data, ScenarioError)
    scenario = Scenario(engine=file.engine, segments=file.segments, requests=file.requests, seed=file.seed)
    _check_references(scenario)
    _check_context(scenario)
    return scenario


def _check_references(scenario: Scenario) -> None:
    """Segment names a prompt uses exist, request ids are unique, ``continues`` names an earlier request."""
    known: set[str] = set()
    for i, r in enumerate(scenario.requests):
        w = f"requests[{i}]."
        if r.id in known:
            raise ScenarioError(f"{w}id", f"duplicate request id {r.id!r}")
        if r.continues is not None and r.continues not in known:
            raise ScenarioError(f"{w}continues", f"{r.continues!r} is not an earlier request")
        for j, part in enumerate(r.prompt):
            if isinstance(part, str) and part not in scenario.segments:
                raise ScenarioError(f"{w}prompt[{j}]", f"unknown segment {part!r}")
        if not r.prompt and r.continues is None:
            raise ScenarioError(f"{w}prompt", "a request needs at least one prompt part")
        if r.abort_step is not None and r.abort_step < r.arrival_step:
            raise ScenarioError(f"{w}abort_step", f"{r.abort_step} is before arrival_step {r.arrival_step}")
        known.add(r.id)


SCHEMA_FILE = "docs/scenario.schema.json"  # in the repository: the published copy of scenario_schema_text()


def scenario_schema_text() -> str:
    """The published JSON Schema of a scenario file (:data:`SCHEMA_FILE`); cross-field rules are checked on load."""
    document = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema.json_schema(ScenarioFile)}
    return json.dumps(document, indent=1) + "\n"


# ---------------------------------------------------------------- the conversation


def own_prompt_length(scenario: Scenario, request: Request) -> int:
    """``len(own_prompt_tokens(scenario, request))``, without making the tokens."""
    return sum(scenario.segments[p] if isinstance(p, str) else p for p in request.prompt)


def prompt_tokens(scenario: Scenario, request: Request, said: Mapping[str, Sequence[int]]) -> list[int]:
    """The prompt ``request`` is sent (a follow-up's parent's prompt and output first); every tier builds it here."""
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
    """Blocks the largest request needs alone; a smaller pool is not a configuration vLLM runs."""
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
