"""RunResult: what one run of one scenario under one policy observed, on any tier.

Every tier (sim, engine, kernels) returns this one shape, so the oracle judges
them alike and Ray can ship results between processes. Everything in it is
plain data (ints, strings, lists) and round-trips through ``to_dict`` /
``from_dict`` unchanged.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

OK = "ok"
UNSUPPORTED = "unsupported"  # the tier cannot run this configuration on this platform


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
    # Sim tier only: how many tokens the state it started from had consumed.
    initial_state_tokens: int | None = None


@dataclass
class StepRecord:
    step: int
    budget: int
    chunks: list[Chunk] = field(default_factory=list)
    # Mamba state copies the model runner made before this step: [src_block, dst_block].
    copies: list[list[int]] = field(default_factory=list)


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

    @property
    def resumed(self) -> bool:
        return self.hit_tokens > 0


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


@dataclass
class Fault:
    """Something that is a finding on its own, whatever the other side did."""

    kind: str  # contract | liveness | exception | engine-crash | hang
    detail: str
    step: int | None = None
    request_id: str | None = None


@dataclass
class RunResult:
    tier: str
    policy: str
    scenario_id: str
    status: str = OK
    requests: dict[str, RequestOutcome] = field(default_factory=dict)
    steps: list[StepRecord] = field(default_factory=list)
    poisoned: list[PoisonedSlot] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    hashed_mamba_blocks: int = 0
    notes: list[str] = field(default_factory=list)

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
            StepRecord(s["step"], s["budget"], [Chunk(**c) for c in s["chunks"]], s["copies"])
            for s in data["steps"]
        ]
        data["poisoned"] = [PoisonedSlot(**p) for p in data["poisoned"]]
        data["faults"] = [Fault(**f) for f in data["faults"]]
        return cls(**data)

    def chunk_table(self, request_id: str) -> list[tuple[int, Chunk]]:
        return [(s.step, c) for s in self.steps for c in s.chunks if c.request_id == request_id]
