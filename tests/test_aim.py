"""Aimed budgets (``fuzz.search.aim``): from a run's own prefill chunks, a step budget that offers the split exactly
up to a chosen position, on vLLM's real Scheduler."""

from __future__ import annotations

import random

from fuzz.model.policies import Policy, resolve_policy
from fuzz.model.result import Chunk, RequestOutcome, RunResult, StepRecord
from fuzz.model.scenario import Scenario
from fuzz.search import aim
from fuzz.search.mutate import MUTATIONS
from fuzz.tiers import executor_for

ONE_PROMPT = {"gdnfuzz_scenario": 1, "seed": 1,
              "engine": {"mamba_block_size": 64, "block_size": 16, "max_num_batched_tokens": 512},
              "segments": {}, "requests": [{"id": "r0", "prompt": [200], "max_tokens": 2},
                                           {"id": "r1", "prompt": [150], "max_tokens": 2, "arrival_step": 3}]}


def _offers(scenario: Scenario) -> list[tuple[int, int]]:
    """(start, tokens offered) of every split call of vLLM's split on ``scenario``."""
    split = resolve_policy("vllm").split
    seen: list[tuple[int, int]] = []

    def recording(scheduler, request, offered, *hits):  # noqa: ANN001, ANN202 - the split's own signature
        seen.append((request.num_computed_tokens + sum(hits[:2]), offered))
        return split(scheduler, request, offered, *hits)

    executor_for("sim").run(scenario, Policy("recording", "vllm", recording))
    return seen


def test_an_aimed_budget_offers_exactly_up_to_its_target():
    scenario = Scenario.from_dict(ONE_PROMPT)
    aim.remember(scenario, executor_for("sim").run(scenario, resolve_policy("vllm")))
    rng, offered, aimed = random.Random(3), 0, 0
    for _ in range(30):
        out = aim.aim_budget(scenario, rng)
        assert out.to_dict() | {"engine": None} == scenario.to_dict() | {"engine": None}
        assert out.engine.step_budgets and out.engine.max_num_batched_tokens == 512
        assert Scenario.from_dict(out.to_dict()) == out
        step, budget = len(out.engine.step_budgets) - 1, out.engine.step_budgets[-1]
        assert out.engine.step_budgets[:-1] == (512,) * step  # every earlier step as it was
        aimed += 1
        chunks = [c for c in aim._RUNS[aim._key(scenario)] if c.step == step]
        wanted = {(c.start, budget - c.before) for c in chunks}
        offered += bool(wanted & set(_offers(out)))
    assert aimed == 30 and offered >= 27  # a long-prefill threshold or a drafter's share can take some


def test_targets_are_the_positions_the_split_compares():
    chunk = aim.PrefillChunk(step=0, start=10, num_tokens=100, before=0, room=190, marks=(150,))
    assert aim.targets(chunk, 64) == [64 - 1, 64, 64 + 1, 74, 108, 109, 128, 148, 149, 150, 151]
    assert aim.targets(aim.PrefillChunk(step=0, start=10, num_tokens=100, before=0, room=100), 64)[-1] == 109


def test_an_input_whose_run_is_not_remembered_is_left_as_it_is():
    scenario = Scenario.from_dict(ONE_PROMPT | {"seed": 99})
    assert aim.aim_budget(scenario, random.Random(1)) is scenario
    assert MUTATIONS["aim_budget"] is aim.aim_budget


def test_what_is_remembered_is_bounded(monkeypatch):
    monkeypatch.setattr(aim, "MEMORY", 3)
    monkeypatch.setattr(aim, "_RUNS", type(aim._RUNS)())
    base = Scenario.from_dict(ONE_PROMPT)
    run = executor_for("sim").run(base, resolve_policy("vllm"))
    kept = [Scenario.from_dict(ONE_PROMPT | {"seed": seed}) for seed in range(5)]
    for s in kept:
        aim.remember(s, run)
    assert len(aim._RUNS) == 3
    assert aim.aim_budget(kept[0], random.Random(1)) is kept[0]  # the oldest went first
    assert aim.aim_budget(kept[4], random.Random(1)) is not kept[4]


SIBLINGS = {"gdnfuzz_scenario": 1, "seed": 1,
            "engine": {"mamba_block_size": 64, "block_size": 16, "hash_block_size": 16,
                       "max_num_batched_tokens": 512, "shared_prefix_checkpoint": True},
            "segments": {"s0": 97}, "requests": [{"id": "a", "prompt": ["s0", 20], "max_tokens": 2},
                                                 {"id": "b", "prompt": ["s0", 30], "max_tokens": 2,
                                                  "arrival_step": 4}]}


def test_a_junction_and_the_prompt_end_are_aimed_at():
    scenario = Scenario.from_dict(SIBLINGS)
    run = executor_for("sim").run(scenario, resolve_policy("vllm"))
    assert run.requests["b"].junctions == [96]  # attention's hit past the Mamba hit: vLLM's own junction
    aim.remember(scenario, run)
    b = next(c for c in aim._RUNS[aim._key(scenario)] if c.step >= 4)
    assert b.marks == (127, 126, 96) and b.start + b.room == 127
    assert {95, 96, 97, 125, 126, 127} <= set(aim.targets(b, 64))


def test_a_resumed_replay_is_aimed_at_its_own_end():
    chunk = aim.PrefillChunk(step=9, start=100, num_tokens=64, before=0, room=190, marks=(150, 289))
    assert [t for t in aim.targets(chunk, 64) if t > 200] == [287, 288, 289, 290]
    preempted = RunResult(tier="sim", policy="vllm", scenario_id="x",
                          requests={"r": RequestOutcome(id="r", prompt_tokens=150)},
                          steps=[StepRecord(0, 512, [Chunk("r", 0, 150)]), StepRecord(1, 512, [Chunk("r", 150, 1)]),
                                 StepRecord(2, 512, [Chunk("r", 0, 128)]), StepRecord(3, 512, [Chunk("r", 128, 23)]),
                                 StepRecord(4, 512, [Chunk("r", 151, 1)])])
    assert aim._prefill_phases(preempted) == {("r", 0): 150, ("r", 2): 151, ("r", 3): 151}
