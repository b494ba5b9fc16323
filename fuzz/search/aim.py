"""Budgets aimed at the split's comparisons, from an input's own run (libFuzzer's input-to-state idea, for budgets).

The split turns on exact positions: a chunk ending at a block boundary or one either side, one or two tokens short
of where it would end, a budget of exactly one block, and one token either side of a request's prefill end (its
prompt's, or a resumed request's replay end) and of its shared-prefix junction. Random budgets hit those one draw
in a block. Here the fuzzer keeps, for each recent input, the chunks its run scheduled (:func:`remember`); :func:`aim_budget` picks one
prefill chunk of that run and sets the budget of its step so that the chunk is offered exactly up to such a
position, every earlier step's budget as it was.

Invariants: an aimed scenario differs from its parent in ``step_budgets`` alone, and every budget in it is one the
knob table accepts; what is remembered is bounded (``MEMORY`` inputs) and never changes a verdict; an input whose
run is not remembered (evicted, another process's, a raw byte mutation's) is returned unchanged."""

from __future__ import annotations

import hashlib
import random
from collections import OrderedDict
from dataclasses import dataclass, replace

from fuzz.model.result import RunResult
from fuzz.model.scenario import Scenario, canonical_json

MEMORY = 4096  # inputs whose chunks are kept, most recent first out last
MOST_STEPS = 64  # an aimed step is among the first this many (step_budgets grows to it)


@dataclass(frozen=True)
class PrefillChunk:
    """One prefill chunk (a prompt's, or a resumed request's replay): its step, where it started, its tokens, the
    tokens scheduled before it in that step, and the positions of its request the split compares against."""

    step: int
    start: int
    num_tokens: int
    before: int
    room: int  # the most it could be offered: up to where its contiguous prefill ended, or its prompt's end
    marks: tuple[int, ...] = ()  # its prompt's end, its prefill's end, its junctions


_RUNS: OrderedDict[str, tuple[PrefillChunk, ...]] = OrderedDict()


def _key(scenario: Scenario) -> str:
    return hashlib.sha1(canonical_json(scenario).encode()).hexdigest()


def _prefill_phases(run: RunResult) -> dict[tuple[str, int], int]:
    """For each prefill chunk (request, step): where its request's contiguous run of prefill chunks ended."""
    ends: dict[tuple[str, int], int] = {}
    for rid, outcome in run.requests.items():
        phase: list[tuple[str, int]] = []
        end = -1
        for step, chunk in run.chunk_table(rid):
            prefill = not chunk.num_draft_tokens and (chunk.num_tokens > 1 or chunk.start < outcome.prompt_tokens)
            if not prefill or chunk.start != end:
                ends.update(dict.fromkeys(phase, end))
                phase = []
            end = chunk.start + chunk.num_tokens
            if prefill:
                phase.append((rid, step))
        ends.update(dict.fromkeys(phase, end))
    return ends


def remember(scenario: Scenario, run: RunResult) -> None:
    """Keep the prefill chunks of ``run`` (a run of ``scenario``) for :func:`aim_budget`; the oldest go first."""
    phases = _prefill_phases(run)
    chunks = []
    for record in run.steps[:MOST_STEPS]:
        before = 0
        for chunk in record.chunks:
            ended = phases.get((chunk.request_id, record.step))
            if ended is not None:
                outcome = run.requests[chunk.request_id]
                prompt = outcome.prompt_tokens
                room = max(ended, prompt) - chunk.start
                marks = (prompt, ended - 1, *outcome.junctions)
                chunks.append(PrefillChunk(record.step, chunk.start, chunk.num_tokens, before, room, marks))
            before += chunk.num_tokens
    key = _key(scenario)
    _RUNS[key] = tuple(chunks)
    _RUNS.move_to_end(key)
    while len(_RUNS) > MEMORY:
        _RUNS.popitem(last=False)


def targets(chunk: PrefillChunk, block: int) -> list[int]:
    """Where the split's comparisons turn for this chunk: one or two short of its end, the next boundaries and one
    either side, a block from its start, each mark and one either side (two short); each past its start and within
    its room."""
    end = chunk.start + chunk.num_tokens
    boundary = (chunk.start // block + 1) * block
    found = {end - 1, end - 2, boundary - 1, boundary, boundary + 1, boundary + block, chunk.start + block}
    found.update(mark + delta for mark in chunk.marks for delta in (-2, -1, 0, 1))
    return sorted(t for t in found if chunk.start < t <= chunk.start + chunk.room)


def aim_budget(s: Scenario, rng: random.Random) -> Scenario:
    """``s`` with one step's budget aimed at a target of one of its run's prefill chunks (module docstring)."""
    chunks = _RUNS.get(_key(s))
    if not chunks:
        return s
    chunk = rng.choice(chunks)
    reachable = targets(chunk, s.engine.mamba_block_size)
    budget = chunk.before + rng.choice(reachable) - chunk.start if reachable else 0
    if not 1 <= budget <= s.engine.max_num_batched_tokens:
        return s
    budgets = tuple(s.engine.budget_at(step) for step in range(chunk.step)) + (budget,)
    return replace(s, engine=replace(s.engine, step_budgets=budgets))
