"""RunResult: what one run of one scenario under one policy observed, the one shape every tier returns.
Invariant: all plain data, round-tripping through ``to_dict``/``from_dict`` unchanged; a file's copy is read with
``fuzz.model.schema``, ``_ON_FILE`` refusing a key no field names."""

from __future__ import annotations

import hashlib
import json
import traceback
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, with_config

_ON_FILE = with_config(ConfigDict(extra="forbid"))  # how fuzz.model.schema reads a file's copy of these


class RunStatus(StrEnum):
    """Whether a tier ran the scenario (equal to its string value, so results stay plain JSON)."""

    OK = "ok"
    UNSUPPORTED = "unsupported"  # the tier cannot run this (valid) configuration; the reason is in ``notes``


class VerdictStatus(StrEnum):
    """What the oracle concluded about a candidate against a reference on one tier."""

    CLEAN = "clean"  # no finding on either side, and (on tiers with real numerics) the canary was caught
    DIVERGED = "diverged"  # at least one correctness finding
    INCONCLUSIVE = "inconclusive"  # nothing found, but the canary was missed: "clean" would mean nothing
    UNSUPPORTED = "unsupported"  # a side could not run on this tier
    REGRESSED = "regressed"  # no correctness finding, but the candidate costs the user more (the efficiency class)


class ConfirmState(StrEnum):
    """What ``gdnfuzz confirm`` records for a finding (``confirmed`` in ``verdict.json``)."""

    CONFIRMED = "confirmed"  # the tier saw the poisoned slot (or the divergence) itself
    NOT_CONFIRMED = "not confirmed"  # nothing found while the canary WAS caught in the same configuration
    INCONCLUSIVE = "inconclusive"  # the canary was missed, the tier crashed, or it could not run the input


@_ON_FILE
@dataclass
class Chunk:
    """One request's share of one scheduler step: tokens [start, start + num_tokens)."""

    request_id: str
    start: int
    num_tokens: int
    num_draft_tokens: int = 0
    state_column: int = -1
    # Physical Mamba blocks: the state this chunk started from (None: zero state),
    # and where the state after each processed position that vLLM keeps was
    # written (one entry for a prefill chunk; 1 + drafts for a verify step).
    read_block: int | None = None
    write_blocks: list[int] = field(default_factory=list)
    # Sim tier only: how many tokens the state it started from had consumed, and the internal prefill
    # checkpoint it exported (the state after that many tokens, into that physical block; None: none).
    initial_state_tokens: int | None = None
    checkpoint_tokens: int | None = None
    checkpoint_block: int | None = None


@_ON_FILE
@dataclass
class StepRecord:
    step: int
    budget: int
    chunks: list[Chunk] = field(default_factory=list)
    # Mamba state copies the model runner made before this step: [src_block, dst_block].
    copies: list[list[int]] = field(default_factory=list)
    seconds: float | None = None  # wall time of the step, where the tier measures it (engine)


@_ON_FILE
@dataclass
class RequestOutcome:
    """What a request observed. ``resume_*`` are set when it started from a cache hit."""

    id: str
    prompt_tokens: int
    hit_tokens: int = 0
    resume_state: str | None = None  # fingerprint of the state it resumed from
    resume_state_ok: bool | None = None  # did that state hold exactly hit_tokens tokens of its prompt
    output_tokens: list[int] = field(default_factory=list)
    prompt_digest: str | None = None  # what prompt this run actually saw (multi-turn follow-ups vary)
    expected_tokens: list[int] | None = None  # sim tier: the exact greedy continuation of that prompt
    logprobs: list[float] | None = None  # chosen-token logprob per output token (engine tier)
    top_logprobs: list[dict[str, float]] | None = None
    first_step: int | None = None
    finish_step: int | None = None
    finish_reason: str | None = None
    # Sim tier, split mode: the shared-prefix junctions it was scheduled with. A search hint (``fuzz.search.aim``),
    # not an observation: outside equality, so a branch-mode run (which cannot see them) equals the same run.
    junctions: list[int] = field(default_factory=list, compare=False)

    @property
    def resumed(self) -> bool:
        return self.hit_tokens > 0


@_ON_FILE
@dataclass
class PoisonedSlot:
    """A Mamba block hashed into the prefix cache whose state is not the one its hash claims."""

    step: int
    block_id: int
    request_id: str
    column: int
    claimed_tokens: int
    held_tokens: int | None  # prefix length held, None when not a prefix of the claim
    held: str  # a short description: "state@364", "state of 1200 foreign tokens"

    def describe(self) -> str:
        return f"slot hashed as state@{self.claimed_tokens} holds {self.held}"


@_ON_FILE
@dataclass
class SplitDisagreement:
    """The first split decision where candidate and reference differ on the same scheduler state (a finding's root
    cause): how it departs, the rule that decides, where, and the inputs without which the two agree."""

    step: int
    request_id: str
    start: int
    offered: int
    candidate: int
    reference: int
    departure: str
    decider: str
    region: str = ""
    conditions: tuple[str, ...] = ()
    candidate_end: str = ""  # where the candidate's chunk ends, classed by the same rules as ``decider``


@_ON_FILE
@dataclass
class Fault:
    """A finding on its own, whatever the other side did; ``stack``: where an exception was raised, if caught."""

    kind: str  # contract | liveness | exception | engine-crash | hang
    detail: str
    step: int | None = None
    request_id: str | None = None
    stack: str | None = None


def exception_stack(exc: BaseException) -> str:
    """``exc``'s stack from its first vLLM frame down to the raise, then the exception: the same on every machine."""
    frames = traceback.extract_tb(exc.__traceback__)
    first = next((i for i, f in enumerate(frames) if "vllm" in Path(f.filename).parts[:-1]), 0)
    lines = []
    for frame in frames[first:]:
        parts = Path(frame.filename).parts
        inside = len(parts) - 1 - parts[::-1].index("vllm") if "vllm" in parts[:-1] else len(parts) - 1
        lines.append(f"{Path(*parts[inside:]).as_posix()}:{frame.lineno} in {frame.name}")
        lines += [f"    {frame.line}"] if frame.line else []
    return "\n".join([*lines, f"{type(exc).__name__}: {exc}"])


@_ON_FILE
@dataclass
class RunResult:
    tier: str
    policy: str
    scenario_id: str
    status: RunStatus = RunStatus.OK
    requests: dict[str, RequestOutcome] = field(default_factory=dict)
    steps: list[StepRecord] = field(default_factory=list)
    poisoned: list[PoisonedSlot] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    hashed_mamba_blocks: int = 0
    notes: list[str] = field(default_factory=list)
    disagreement: SplitDisagreement | None = None  # vs the reference the run was given (``fuzz.tiers``)

    def fingerprint(self) -> str:
        """Digest of everything a request observed: equal runs give equal fingerprints."""
        observed = {
            rid: (o.hit_tokens, o.resume_state, o.output_tokens, o.finish_reason)
            for rid, o in sorted(self.requests.items())
        }
        blob = json.dumps([observed, [asdict(p) for p in self.poisoned]], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        data = dict(data)
        data["requests"] = {k: RequestOutcome(**v) for k, v in data["requests"].items()}
        data["steps"] = [
            StepRecord(s["step"], s["budget"], [Chunk(**c) for c in s["chunks"]], s["copies"], s.get("seconds"))
            for s in data["steps"]
        ]
        data["poisoned"] = [PoisonedSlot(**p) for p in data["poisoned"]]
        data["faults"] = [Fault(**f) for f in data["faults"]]
        if data.get("disagreement") is not None:
            data["disagreement"] = SplitDisagreement(**{**data["disagreement"],
                                                        "conditions": tuple(data["disagreement"]["conditions"])})
        return cls(**data)

    def chunk_table(self, request_id: str) -> list[tuple[int, Chunk]]:
        return [(s.step, c) for s in self.steps for c in s.chunks if c.request_id == request_id]


def exact_outputs_differ(c: RequestOutcome, r: RequestOutcome) -> bool:
    """Tokens differ where both produced one; lengths count only if neither was aborted (tiers without noise)."""
    n = min(len(c.output_tokens), len(r.output_tokens))
    if c.output_tokens[:n] != r.output_tokens[:n]:
        return True
    aborted = "FINISHED_ABORTED" in (c.finish_reason, r.finish_reason)
    return not aborted and len(c.output_tokens) != len(r.output_tokens)


@dataclass
class PoisonVerdict:
    """A tier's verdict on one run's slots (poisoned, clean, inconclusive, unsupported, a fault kind), with its runs."""

    verdict: str
    result: RunResult
    canary: RunResult | None = None
    canary_caught: bool | None = None

    def confirmation(self) -> ConfirmState:
        """What a confirm records: only ``poisoned`` confirms and only ``clean`` refutes."""
        return {"poisoned": ConfirmState.CONFIRMED, "clean": ConfirmState.NOT_CONFIRMED}.get(
            self.verdict, ConfirmState.INCONCLUSIVE)
