"""What a run cost the user, read off a ``RunResult`` alone, so equal runs give equal costs on every tier.
A *forward pass* is a step that ran a chunk; *prefill chunks* start inside the prompt, without drafts (recomputation
counts again); ``idle_budget`` is budget left unused while an arrived request had prompt left; ``hit_tokens`` is what
a request resumed from when first scheduled."""

from __future__ import annotations

from dataclasses import dataclass, field

from fuzz.model.result import RunResult
from fuzz.model.scenario import Scenario


@dataclass(frozen=True)
class RequestCost:
    request_id: str
    prompt_tokens: int
    hit_tokens: int
    prefill_chunks: int
    arrival_step: int | None  # None: the request never arrived (its parent did not finish)
    prefill_done_step: int | None  # the step of its last prefill chunk; None: never prefilled
    prompt_digest: str | None  # which prompt it saw (a follow-up's depends on its parent's output)

    @property
    def steps_to_first_token(self) -> int | None:
        """Steps from arrival to the step that computed the last prompt token, both counted."""
        if self.arrival_step is None or self.prefill_done_step is None:
            return None
        return self.prefill_done_step - self.arrival_step + 1


@dataclass(frozen=True)
class RunCost:
    forward_passes: int
    scheduled_tokens: int
    idle_budget: int  # budget left unused while prefill work waited
    states_written: int  # Mamba state writes the chunks made (one per kept position)
    states_cached: int  # Mamba blocks hashed into the prefix cache (most at once)
    resumed: int  # requests that started from a cache hit
    requests: dict[str, RequestCost] = field(default_factory=dict)
    step_seconds: tuple[float, ...] = ()  # wall time per step, where the tier measures it (engine)

    @property
    def hit_tokens(self) -> int:
        return sum(r.hit_tokens for r in self.requests.values())

    @property
    def prefill_chunks(self) -> int:
        return sum(r.prefill_chunks for r in self.requests.values())


def _arrivals(scenario: Scenario, result: RunResult) -> dict[str, int | None]:
    arrivals: dict[str, int | None] = {}
    for r in scenario.requests:  # parents come first
        if r.continues is None:
            arrivals[r.id] = r.arrival_step
            continue
        parent = result.requests.get(r.continues)
        done = None if parent is None else parent.finish_step
        arrivals[r.id] = None if done is None or arrivals[r.continues] is None else max(r.arrival_step, done + 1)
    return arrivals


def run_cost(scenario: Scenario, result: RunResult) -> RunCost:
    arrivals = _arrivals(scenario, result)
    chunks: dict[str, int] = dict.fromkeys(result.requests, 0)
    done: dict[str, int] = {}
    passes = scheduled = written = 0
    for step in result.steps:
        passes += bool(step.chunks)
        for c in step.chunks:
            scheduled += c.num_tokens
            written += len(c.write_blocks)
            outcome = result.requests.get(c.request_id)
            if outcome is not None and not c.num_draft_tokens and c.start < outcome.prompt_tokens:
                chunks[c.request_id] = chunks.get(c.request_id, 0) + 1
                done[c.request_id] = step.step
    requests = {
        rid: RequestCost(rid, o.prompt_tokens, o.hit_tokens, chunks.get(rid, 0), arrivals.get(rid), done.get(rid),
                         o.prompt_digest)
        for rid, o in result.requests.items()
    }
    idle = 0
    waits = [(arrivals[rid], done.get(rid, o.finish_step)) for rid, o in result.requests.items()
             if arrivals.get(rid) is not None]
    for step in result.steps:
        waiting = any(start <= step.step and (end is None or step.step < end) for start, end in waits)
        if waiting:
            idle += max(step.budget - sum(c.num_tokens for c in step.chunks), 0)
    seconds = tuple(s.seconds for s in result.steps if s.seconds is not None)
    return RunCost(passes, scheduled, idle, written, result.hashed_mamba_blocks,
                   sum(1 for o in result.requests.values() if o.resumed), requests, seconds)
