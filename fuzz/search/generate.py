"""Random valid scenarios, biased toward what triggers the align-mode bug family (near-multiple prompt lengths,
shared prefixes arriving together, followers after the producer, KV-connector prefixes), weighted by a profile.

Invariants: the result always passes ``Scenario.from_dict``; a limited KV pool always holds the largest request (a
stall is never an artefact of generation); under the prefill profile a seed gives the scenario it always gave."""

from __future__ import annotations

from dataclasses import replace

from fuzz.model.draws import MAX_NUM_SEQS, Choices, near_multiple, tight_kv_blocks
from fuzz.model.knobs import EngineKnobs, Facts, draw_knobs
from fuzz.model.scenario import (
    MAX_CONTEXT,
    Request,
    Scenario,
    conversation_lengths,
    prompt_lengths,
    required_kv_blocks,
)
from fuzz.search.profiles import PREFILL, Profile


def random_requests(c: Choices, engine: EngineKnobs, segments: dict[str, int],
                    profile: Profile = PREFILL) -> tuple[Request, ...]:
    requests: list[Request] = []
    names = list(segments)
    for i in range(c.randint(1, profile.most_requests)):
        rid = f"r{i}"
        parts: list[str | int] = []
        continues = None
        if requests and c.random() < profile.continue_rate:
            continues = c.choice(requests).id
        elif c.random() < 0.85:
            parts.append(c.choice(names))
            if c.random() < 0.4 and len(names) > 1:
                parts.append(c.choice(names))
        if not parts or c.random() < 0.6:
            parts.append(c.choice((c.randint(1, 64), near_multiple(c, engine.mamba_block_size, profile.prompt_blocks))))
        arrival = 0 if profile.together else c.choice((0, 0, c.randint(0, 3), c.randint(2, 12)))
        max_tokens = profile.output_tokens(c)
        abort = arrival + c.randint(0, 6 if not profile.deep else max_tokens + 8) \
            if c.random() < profile.abort_rate else None
        accept = tuple(c.randint(0, engine.num_spec_tokens) for _ in range(c.randint(1, 3))) \
            if engine.num_spec_tokens and c.random() < 0.7 else ()
        requests.append(Request(rid, tuple(parts), arrival, max_tokens, abort, continues, accept))
    return tuple(requests)


def external_tokens(c: Choices, engine: EngineKnobs, prompt_length: int) -> int:
    """How much of a prompt a KV connector holds: near a block boundary, often mid-block."""
    return max(0, min(prompt_length - 1, near_multiple(c, engine.mamba_block_size, 2)))


def with_connector(c: Choices, scenario: Scenario) -> Scenario:
    lengths = prompt_lengths(scenario)
    requests = tuple(
        replace(r, external_tokens=external_tokens(c, scenario.engine, lengths[r.id])) if c.random() < 0.5 else r
        for r in scenario.requests)
    return replace(scenario, requests=requests)


def facts(scenario: Scenario) -> Facts:
    """What the knob table's generators and mutators may read of a scenario's requests."""
    return Facts(required_kv_blocks=required_kv_blocks(scenario))


def _redraw(c: Choices, phase: str, scenario: Scenario) -> Scenario:
    return replace(scenario, engine=EngineKnobs(**draw_knobs(c, phase, vars(scenario.engine), facts(scenario))))


def random_scenario(c: Choices, profile: Profile = PREFILL) -> Scenario:
    engine = _engine_for(c, profile)
    segments = {f"s{j}": near_multiple(c, engine.mamba_block_size) for j in range(c.randint(1, 3))}
    requests = random_requests(c, engine, segments, profile)
    scenario = within_context(Scenario(engine=engine, segments=segments, requests=requests,
                                       seed=c.randint(0, 1 << 30)))
    scenario = _redraw(c, "family", scenario)
    if c.random() < 0.2:
        scenario = with_connector(c, scenario)
    scenario = _redraw(c, "pool", scenario)
    if profile.pressure_rate and c.random() < profile.pressure_rate:
        scenario = under_decode_pressure(c, scenario)
    if profile.deep:
        scenario = within_steps(scenario, profile.max_steps)
    # round-trip through validation: generation can never produce what the parser rejects
    return Scenario.from_dict(scenario.to_dict())


def _engine_for(c: Choices, profile: Profile) -> EngineKnobs:
    """The engine knobs; under a deep profile, the smaller-B draw of two, so that outputs cross block boundaries."""
    engine = EngineKnobs(**draw_knobs(c, "engine", {}))
    if not profile.deep:
        return engine
    other = EngineKnobs(**draw_knobs(c, "engine", {}))
    return other if other.mamba_block_size < engine.mamba_block_size else engine


def serial_steps(scenario: Scenario) -> int:
    """Scheduler steps with the requests run one after another: what bounds a run's (and a mutation's) cost."""
    e = scenario.engine
    chunk = min((e.max_num_batched_tokens, *e.step_budgets))
    if e.long_prefill_token_threshold > 0:
        chunk = min(chunk, e.long_prefill_token_threshold)
    lengths = prompt_lengths(scenario)
    return max(r.arrival_step for r in scenario.requests) + sum(
        -(-lengths[r.id] // max(chunk, 1)) + r.max_tokens for r in scenario.requests)


def within_steps(scenario: Scenario, max_steps: int) -> Scenario:
    """``scenario`` with its longest outputs halved until its ``serial_steps`` fit ``max_steps``."""
    while serial_steps(scenario) > max_steps and any(r.max_tokens > 1 for r in scenario.requests):
        longest = max(scenario.requests, key=lambda r: r.max_tokens)
        scenario = replace(scenario, requests=tuple(replace(r, max_tokens=r.max_tokens // 2) if r is longest else r
                                                    for r in scenario.requests))
    return scenario


SIDE_BY_SIDE = tuple(n for n in MAX_NUM_SEQS if n > 1)  # the generator's limits that run several requests


def under_decode_pressure(c: Choices, scenario: Scenario) -> Scenario:
    """A KV pool holding the largest request alone with little to spare; several requests never run one at a time."""
    blocks = tight_kv_blocks(required_kv_blocks(scenario), c.random() * 0.25)
    seqs = scenario.engine.max_num_seqs
    if seqs == 1 and len(scenario.requests) > 1:
        seqs = c.choice(SIDE_BY_SIDE)
    return scenario.with_engine(num_kv_blocks=blocks, max_num_seqs=seqs)


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
