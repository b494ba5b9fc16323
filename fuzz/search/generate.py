"""Random valid scenarios, biased toward what triggers the align-mode bug family.

``random_scenario(choices)`` draws every decision from ``choices``, anything with
``randint(a, b)`` (inclusive), ``choice(seq)`` and ``random()``: a seeded
``random.Random`` for ``gdnfuzz gen`` and benchmarks, or a byte-driven source
for the fuzzer's fallback decoder. The biases: chunk budgets that fragment a
block (below B, just above B, 2B minus a little, hand-picked per-step budgets),
prompt lengths within a few tokens of multiples of B, several requests sharing
one prefix and arriving close together (concurrent prefills), and followers
arriving after the producer finished (cache hits on its slots). Beyond GDN's
configuration: a Mamba spec with internal prefill checkpoints (Mamba2, KDA alignments),
shared-prefix junction checkpoints with partial hits and a drafter, and requests whose
prefix a KV connector holds (often ending mid-block, sometimes beyond what the local
cache has, with a tight pool so local blocks get evicted and come back externally).

Invariant: the result always passes ``Scenario.from_dict`` validation, and the
KV pool (when limited) always holds the largest request, so a stall is never
an artefact of generation.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from fuzz.model.scenario import (
    MAX_CONTEXT,
    EngineKnobs,
    Request,
    Scenario,
    conversation_lengths,
    prompt_lengths,
    required_kv_blocks,
)

MAMBA_BLOCK_SIZES = (64, 128, 256, 384, 512, 1600)
CHECKPOINT_ALIGNMENTS = (1, 1, 16, 64)  # Mamba2 declares 1; KDA layers declare their chunk size


class Choices(Protocol):
    def randint(self, a: int, b: int) -> int: ...
    def choice(self, seq: Any) -> Any: ...
    def random(self) -> float: ...


def near_multiple(c: Choices, block: int, max_blocks: int = 3) -> int:
    """A length within a few tokens of k * block (k >= 1), or anywhere up to max_blocks * block."""
    k = c.randint(1, max_blocks)
    delta = c.choice((-1, 0, 1, -c.randint(2, 48), c.randint(2, 48), c.randint(-block + 1, block - 1)))
    return max(1, k * block + delta)


def fragmenting_budget(c: Choices, block: int) -> int:
    return max(16, c.choice((
        block // 2 + c.randint(-8, 8),
        block,
        block + c.randint(1, 64),
        2 * block - c.randint(1, 64),
        c.randint(16, 4 * block),
        c.randint(block // 8 + 1, block),
    )))


def random_engine(c: Choices) -> EngineKnobs:
    block = c.choice(MAMBA_BLOCK_SIZES)
    attention = c.choice((16, 16, block))
    hash_block = c.choice((16, attention))
    spec = c.choice(("off", "off", "mtp", "eagle"))
    num_spec = 0 if spec == "off" else c.randint(1, 4)
    budgets = tuple(fragmenting_budget(c, block) for _ in range(c.randint(1, 4))) if c.random() < 0.35 else ()
    return EngineKnobs(
        mamba_block_size=block,
        block_size=attention,
        hash_block_size=hash_block,
        max_num_batched_tokens=fragmenting_budget(c, block) + (1 + num_spec) * 8,
        step_budgets=budgets,
        long_prefill_token_threshold=c.choice((0, 0, 0, c.randint(16, 2 * block))),
        max_num_seqs=c.choice((1, 2, 4, 8, 16)),
        spec_decode=spec,
        num_speculative_tokens=num_spec,
        retention_interval=c.choice((None, None, 0, block, 2 * block)),
    )


def random_requests(c: Choices, engine: EngineKnobs, segments: dict[str, int]) -> tuple[Request, ...]:
    requests: list[Request] = []
    names = list(segments)
    for i in range(c.randint(1, 5)):
        rid = f"r{i}"
        parts: list[str | int] = []
        continues = None
        if requests and c.random() < 0.15:
            continues = c.choice(requests).id
        elif c.random() < 0.85:
            parts.append(c.choice(names))
            if c.random() < 0.4 and len(names) > 1:
                parts.append(c.choice(names))
        if not parts or c.random() < 0.6:
            parts.append(c.choice((c.randint(1, 64), near_multiple(c, engine.mamba_block_size, 1))))
        arrival = c.choice((0, 0, c.randint(0, 3), c.randint(2, 12)))
        max_tokens = c.randint(1, 8)
        abort = arrival + c.randint(0, 6) if c.random() < 0.08 else None
        accept = tuple(c.randint(0, engine.num_spec_tokens) for _ in range(c.randint(1, 3))) \
            if engine.num_spec_tokens and c.random() < 0.7 else ()
        requests.append(Request(rid, tuple(parts), arrival, max_tokens, abort, continues, accept))
    return tuple(requests)


def random_checkpointing(c: Choices, engine: EngineKnobs) -> EngineKnobs:
    """The Mamba layer family and shared-prefix checkpointing (drawn after the GDN-era knobs)."""
    alignment = c.choice(CHECKPOINT_ALIGNMENTS) if c.random() < 0.3 else None
    shared = engine.partial_hash_hits and engine.spec_decode != "off" and c.random() < 0.5
    return replace(engine, prefill_checkpoint_alignment=alignment, shared_prefix_checkpoint=shared)


def external_tokens(c: Choices, engine: EngineKnobs, prompt_length: int) -> int:
    """How much of a prompt a KV connector holds: near a block boundary, often mid-block."""
    return max(0, min(prompt_length - 1, near_multiple(c, engine.mamba_block_size, 2)))


def with_connector(c: Choices, scenario: Scenario) -> Scenario:
    """Give some requests an externally held prefix."""
    lengths = prompt_lengths(scenario)
    requests = tuple(
        replace(r, external_tokens=external_tokens(c, scenario.engine, lengths[r.id])) if c.random() < 0.5 else r
        for r in scenario.requests)
    return replace(scenario, requests=requests)


def random_scenario(c: Choices) -> Scenario:
    engine = random_engine(c)
    segments = {f"s{j}": near_multiple(c, engine.mamba_block_size) for j in range(c.randint(1, 3))}
    requests = random_requests(c, engine, segments)
    scenario = within_context(Scenario(engine=engine, segments=segments, requests=requests,
                                       seed=c.randint(0, 1 << 30)))
    scenario = replace(scenario, engine=random_checkpointing(c, engine))
    if c.random() < 0.2:
        scenario = with_connector(c, scenario)
    if c.random() < 0.15:
        scenario = scenario.with_engine(num_kv_blocks=tight_kv_blocks(scenario, c.random()))
    # round-trip through validation: generation can never produce what the parser rejects
    return Scenario.from_dict(scenario.to_dict())


def within_context(scenario: Scenario) -> Scenario:
    """Drop the requests (and their follow-ups) that could outgrow the model's context."""
    lengths = conversation_lengths(scenario)
    kept: list[Request] = []
    kept_ids: set[str] = set()
    for r in scenario.requests:
        if lengths[r.id] <= MAX_CONTEXT and (r.continues is None or r.continues in kept_ids):
            kept.append(r)
            kept_ids.add(r.id)
    return replace(scenario, requests=tuple(kept) or (Request("r0", (1,)),))


def tight_kv_blocks(scenario: Scenario, slack: float) -> int:
    """A pool that holds the largest request with ``slack`` in [0, 1) to spare: preemption pressure."""
    return int(required_kv_blocks(scenario) * (1.0 + slack)) + 4
