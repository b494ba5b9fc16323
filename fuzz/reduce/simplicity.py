"""The one definition of "simpler" (:func:`simplicity_key`): its components are non-negative ints, so shrinking ends."""

from __future__ import annotations

from fuzz.model.knobs import KNOBS, EngineKnobs
from fuzz.model.scenario import Scenario, prompt_lengths

SPEC_RANK = {"off": 0, "mtp": 1, "eagle": 2}  # the sim configures eagle as the MTP head: mtp is the plainer name


def prefill_steps(scenario: Scenario) -> int:
    """A lower bound on prefill steps: how many steps' budgets it takes to cover every prompt token."""
    e = scenario.engine
    left = sum(prompt_lengths(scenario).values())
    steps = 0
    for budget in e.step_budgets:
        if left <= 0:
            return steps
        left, steps = left - budget, steps + 1
    return steps + max(0, -(-left // e.max_num_batched_tokens))


def _non_default_knobs(e: EngineKnobs) -> int:
    """Engine knobs away from their defaults (a derived default taken as when parsed)."""
    return sum(not e.at_default(name) for name in KNOBS)


def _list_entries(e: EngineKnobs) -> list[int]:
    return [x for name, row in KNOBS.items() if row.kind == "ints" for x in getattr(e, name)]


def _numbers(s: Scenario) -> list[int]:
    """The free numbers whose size the key weighs (defaulted knobs are already canonical)."""
    e = s.engine
    knobs = [getattr(e, name) or 0 for name, row in KNOBS.items() if row.free_number and not e.at_default(name)]
    return [*_list_entries(e), *knobs, *(r.external_tokens for r in s.requests),
            *(r.abort_step or 0 for r in s.requests)]


def _off_grid(s: Scenario) -> int:
    """Token counts (lengths, budgets) that are not 1 or within one of a multiple of B."""
    block = s.engine.mamba_block_size
    values = [*s.segments.values(), *(p for r in s.requests for p in r.prompt if isinstance(p, int)),
              *_list_entries(s.engine)]
    return sum(v % block not in (0, 1, block - 1) and v != 1 for v in values)


def simplicity_key(scenario: Scenario) -> tuple[int, ...]:
    """Smaller is simpler (lexicographic, most important first): requests, prompt tokens, prefill steps (so a budget
    that only adds chunks is not simpler), spec decode, other counts and sums, off-grid token counts, the seed."""
    e = scenario.engine
    arrivals = [r.arrival_step for r in scenario.requests]
    return (
        len(scenario.requests),
        sum(prompt_lengths(scenario).values()),
        prefill_steps(scenario),
        SPEC_RANK[e.spec_decode],
        e.num_spec_tokens,
        int(bool(e.step_budgets)),
        len(e.step_budgets),
        len(scenario.segments),
        sum(len(r.prompt) for r in scenario.requests),
        sum(r.continues is not None for r in scenario.requests),
        sum(r.max_tokens for r in scenario.requests),
        len({a for a in arrivals if a}),
        sum(arrivals),
        sum(r.abort_step is not None for r in scenario.requests),
        sum(len(r.accept) for r in scenario.requests),
        sum(sum(r.accept) for r in scenario.requests),
        _non_default_knobs(e) + sum(r.external_tokens > 0 for r in scenario.requests),
        sum(_numbers(scenario)),
        _off_grid(scenario),
        scenario.seed,
    )
