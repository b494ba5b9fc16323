"""Structure-aware mutation and crossover of scenarios (canonical JSON), for atheris's custom mutator hooks.

Invariants: ``decode`` turns any bytes into a valid scenario, whatever the profile; every output of ``mutate`` and
``crossover`` decodes to a valid scenario; a mutation that fails validation or exceeds ``max_steps``
(``serial_steps``, the structural ``-max_len``) is dropped; corpus inputs run whatever their size."""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fuzz.model.draws import near_multiple, tight_kv_blocks
from fuzz.model.knobs import EngineKnobs, Facts, knob_mutations
from fuzz.model.scenario import (
    Request,
    Scenario,
    ScenarioError,
    canonical_json,
    prompt_lengths,
    required_kv_blocks,
)
from fuzz.search.aim import aim_budget
from fuzz.search.generate import external_tokens, facts, random_scenario, serial_steps, under_decode_pressure
from fuzz.search.profiles import PREFILL, Profile

Mutation = Callable[[Scenario, random.Random], Scenario]
Outputs = Callable[[random.Random], int]  # how a mutation draws a request's output length
MUTATIONS: dict[str, Mutation] = {}
RAW_MUTATION_RATE = 0.1  # share of mutations left to libFuzzer's byte-level mutator
MAX_STEPS = PREFILL.max_steps  # the prefill profile's bound on a mutation's ``serial_steps`` (``--max-steps``)
DEEP_SHARE = 0.35  # under a deep profile: share of mutations that are the profile's own


def mutation(fn: Mutation) -> Mutation:
    MUTATIONS[fn.__name__] = fn
    return fn


class FdpChoices:
    """The ``fuzz.search.generate.Choices`` interface over atheris's FuzzedDataProvider."""

    def __init__(self, data: bytes):
        import atheris

        self.fdp = atheris.FuzzedDataProvider(data)

    def randint(self, a: int, b: int) -> int:
        return self.fdp.ConsumeIntInRange(a, b)

    def choice(self, seq: Any) -> Any:
        return seq[self.fdp.ConsumeIntInRange(0, len(seq) - 1)]

    def random(self) -> float:
        return self.fdp.ConsumeProbability()


def decode(data: bytes) -> Scenario:
    try:
        return Scenario.from_dict(json.loads(data))
    except (ValueError, TypeError, RecursionError):  # not JSON, or JSON that is not a scenario
        return random_scenario(FdpChoices(data))


def encode(scenario: Scenario) -> bytes:
    return canonical_json(scenario).encode()


def _valid(scenario: Scenario, max_steps: int = MAX_STEPS) -> Scenario | None:
    """Re-validated, its KV pool grown back to hold one request; None if invalid or over ``max_steps``."""
    try:
        scenario = Scenario.from_dict(scenario.to_dict())
    except ScenarioError:
        return None
    blocks, required = scenario.engine.num_kv_blocks, required_kv_blocks(scenario)
    if blocks is not None and blocks < required:
        scenario = scenario.with_engine(num_kv_blocks=tight_kv_blocks(required, 0.0))
    return scenario if serial_steps(scenario) <= max_steps else None


def _replace_request(s: Scenario, index: int, **changes: Any) -> Scenario:
    requests = list(s.requests)
    requests[index] = replace(requests[index], **changes)
    return replace(s, requests=tuple(requests))


def _pick(s: Scenario, rng: random.Random) -> int:
    return rng.randrange(len(s.requests))


def _fresh_id(s: Scenario) -> str:
    taken = {r.id for r in s.requests}
    return next(f"r{i}" for i in range(len(taken) + 1) if f"r{i}" not in taken)


# ---------------------------------------------------------------- request mix


@mutation
def add_request(s: Scenario, rng: random.Random, outputs: Outputs = lambda rng: rng.randint(1, 8)) -> Scenario:
    if len(s.requests) >= 8:
        return s
    parts: list[str | int] = [rng.choice(list(s.segments))] if s.segments and rng.random() < 0.8 else []
    parts.append(rng.choice((rng.randint(1, 64), near_multiple(rng, s.engine.mamba_block_size, 1))))
    arrival = rng.choice((0, max(r.arrival_step for r in s.requests) + rng.randint(0, 8)))
    new = Request(_fresh_id(s), tuple(parts), arrival, outputs(rng))
    return replace(s, requests=(*s.requests, new))


@mutation
def drop_request(s: Scenario, rng: random.Random) -> Scenario:
    i = _pick(s, rng)
    victim = s.requests[i].id
    if len(s.requests) == 1 or any(r.continues == victim for r in s.requests):
        return s
    return replace(s, requests=s.requests[:i] + s.requests[i + 1 :])


@mutation
def follow_up(s: Scenario, rng: random.Random, outputs: Outputs = lambda rng: rng.randint(1, 8)) -> Scenario:
    """A later request extends an earlier one's prompt: a cache hit on the producer's slots."""
    if len(s.requests) >= 8:
        return s
    producer = rng.choice(s.requests)
    tail = rng.choice((rng.randint(1, 64), near_multiple(rng, s.engine.mamba_block_size, 1)))
    new = Request(_fresh_id(s), (*producer.prompt, tail), producer.arrival_step + rng.randint(1, 20),
                  outputs(rng))
    return replace(s, requests=(*s.requests, new))


@mutation
def multi_turn(s: Scenario, rng: random.Random, outputs: Outputs = lambda rng: rng.randint(1, 8)) -> Scenario:
    if len(s.requests) >= 8:
        return s
    parent = rng.choice(s.requests)
    new = Request(_fresh_id(s), (rng.randint(1, 200),), parent.arrival_step, outputs(rng),
                  continues=parent.id)
    return replace(s, requests=(*s.requests, new))


@mutation
def share_prefix(s: Scenario, rng: random.Random) -> Scenario:
    if not s.segments:
        return s
    i = _pick(s, rng)
    rest = s.requests[i].prompt[1:] or (rng.randint(1, 64),)
    return _replace_request(s, i, prompt=(rng.choice(list(s.segments)), *rest))


@mutation
def resize_part(s: Scenario, rng: random.Random) -> Scenario:
    """Segment and tail lengths near multiples of the Mamba block size."""
    block = s.engine.mamba_block_size
    if s.segments and rng.random() < 0.5:
        name = rng.choice(list(s.segments))
        return replace(s, segments={**s.segments, name: near_multiple(rng, block)})
    i = _pick(s, rng)
    parts = list(s.requests[i].prompt)
    ints = [j for j, p in enumerate(parts) if isinstance(p, int)]
    if not ints:
        return s
    parts[rng.choice(ints)] = near_multiple(rng, block, 2)
    return _replace_request(s, i, prompt=tuple(parts))


@mutation
def move_arrival(s: Scenario, rng: random.Random) -> Scenario:
    i = _pick(s, rng)
    r = s.requests[i]
    arrival = rng.choice((0, r.arrival_step + 1, max(0, r.arrival_step - 1), rng.randint(0, 24)))
    abort = r.abort_step if r.abort_step is None or r.abort_step >= arrival else None
    return _replace_request(s, i, arrival_step=arrival, abort_step=abort)


@mutation
def concurrent_prefills(s: Scenario, rng: random.Random) -> Scenario:
    """Everything arrives together: prefills share the step budget."""
    return replace(s, requests=tuple(replace(r, arrival_step=0, abort_step=None) for r in s.requests))


@mutation
def change_outputs(s: Scenario, rng: random.Random, outputs: Outputs = lambda rng: rng.randint(1, 16)) -> Scenario:
    i = _pick(s, rng)
    r = s.requests[i]
    num_spec = s.engine.num_spec_tokens
    accept = tuple(rng.randint(0, num_spec) for _ in range(rng.randint(1, 3))) if num_spec else ()
    abort = r.arrival_step + rng.randint(0, 8) if rng.random() < 0.1 else None
    return _replace_request(s, i, max_tokens=outputs(rng), accept=accept, abort_step=abort)


# ---------------------------------------------------------------- engine knobs: each row's own mutation


def _knob_mutation(change: Callable[[EngineKnobs, random.Random, Facts], dict[str, Any]]) -> Mutation:
    def mutate_knob(s: Scenario, rng: random.Random) -> Scenario:
        return s.with_engine(**change(s.engine, rng, facts(s)))

    return mutate_knob


MUTATIONS.update({name: _knob_mutation(change) for name, change in knob_mutations().items()})


mutation(aim_budget)  # a step budget aimed from the input's own run (fuzz.search.aim)


@mutation
def external_prefix(s: Scenario, rng: random.Random) -> Scenario:
    """A request's prefix held (or no longer held) by the KV connector."""
    i = _pick(s, rng)
    held = 0 if s.requests[i].external_tokens and rng.random() < 0.3 else \
        external_tokens(rng, s.engine, prompt_lengths(s)[s.requests[i].id])
    return _replace_request(s, i, external_tokens=held)


# ---------------------------------------------------------------- a deep profile's own


OUTPUT_DRAWING = (add_request, follow_up, multi_turn, change_outputs)  # they draw outputs as the profile does


@functools.cache
def deep_mutations(profile: Profile) -> dict[str, Mutation]:
    """Under a deep ``profile``: the output-drawing mutations, drawing its lengths, and those toward its deep states."""
    if not profile.deep:
        return {}

    def outputs(rng: random.Random) -> int:
        return profile.output_tokens(rng)

    def long_outputs(s: Scenario, rng: random.Random) -> Scenario:
        return _replace_request(s, _pick(s, rng), max_tokens=outputs(rng))

    def decode_pressure(s: Scenario, rng: random.Random) -> Scenario:
        return under_decode_pressure(rng, s)

    def continue_conversation(s: Scenario, rng: random.Random) -> Scenario:
        if len(s.requests) >= 8:
            return s
        parent = rng.choice(s.requests)
        tail = rng.choice((rng.randint(1, 64), near_multiple(rng, s.engine.mamba_block_size, 1)))
        new = Request(_fresh_id(s), (tail,), parent.arrival_step, outputs(rng), continues=parent.id)
        return replace(s, requests=(*s.requests, new))

    def abort_mid_decode(s: Scenario, rng: random.Random) -> Scenario:
        i = _pick(s, rng)
        r = s.requests[i]
        return _replace_request(s, i, abort_step=r.arrival_step + rng.randint(1, r.max_tokens + 8))

    drawing = {f.__name__: functools.partial(f, outputs=outputs) for f in OUTPUT_DRAWING}
    deep = {f.__name__: f for f in (long_outputs, decode_pressure, continue_conversation, abort_mid_decode)}
    return {**drawing, **deep}


# ---------------------------------------------------------------- hooks


Pool = tuple[Mutation, ...]  # in the order of their names, which a seeded choice picks from


@functools.cache
def mutation_pools(profile: Profile) -> tuple[Pool, Pool]:
    """Every mutation (the profile's versions where it has them) and the profile's own, sorted by name; cached."""
    own = deep_mutations(profile)
    everything = {**MUTATIONS, **{name: own[name] for name in MUTATIONS if name in own}}
    return tuple(everything[n] for n in sorted(everything)), tuple(own[n] for n in sorted(own))


def mutate_scenario(s: Scenario, rng: random.Random, max_steps: int = MAX_STEPS, profile: Profile = PREFILL) -> Scenario:
    everything, own = mutation_pools(profile)
    for _ in range(rng.randint(1, 3)):
        pool = own if own and rng.random() < DEEP_SHARE else everything
        candidate = _valid(rng.choice(pool)(s, rng), max_steps)
        if candidate is not None:
            s = candidate
    return s


def mutate(data: bytes, max_size: int, seed: int, max_steps: int = MAX_STEPS, profile: Profile = PREFILL) -> bytes:
    """atheris custom_mutator: structural most of the time, libFuzzer's own bytes otherwise."""
    rng = random.Random(seed)
    roll = rng.random()
    if roll < RAW_MUTATION_RATE:
        import atheris

        return atheris.Mutate(data, max_size)
    fresh = roll < RAW_MUTATION_RATE + profile.fresh_rate
    out = encode(random_scenario(rng, profile) if fresh else mutate_scenario(decode(data), rng, max_steps, profile))
    return out if len(out) <= max_size else data[:max_size]


def crossover(data1: bytes, data2: bytes, max_size: int, seed: int, max_steps: int = MAX_STEPS) -> bytes:
    """atheris custom_crossover: one parent's engine, requests from both (ids and segments renamed)."""
    rng = random.Random(seed)
    a, b = decode(data1), decode(data2)
    rename = {name: f"x{name}" for name in b.segments}
    segments = {**a.segments, **{rename[n]: length for n, length in b.segments.items()}}
    taken = {r.id for r in a.requests}
    ids = {r.id: (r.id if r.id not in taken else f"x{r.id}") for r in b.requests}
    borrowed = tuple(
        replace(r, id=ids[r.id], continues=ids.get(r.continues) if r.continues else None,
                prompt=tuple(rename.get(p, p) if isinstance(p, str) else p for p in r.prompt))
        for r in b.requests[: rng.randint(1, len(b.requests))]
    )
    child = _valid(replace(a, segments=segments, requests=(a.requests + borrowed)[:8]), max_steps)
    out = encode(child) if child is not None else data1
    return out if len(out) <= max_size else data1[:max_size]
