"""Issue 11's knobs: internal prefill checkpoints, shared-prefix junctions, a KV connector.

Checks that the new knobs leave every old scenario's bytes and id alone, are validated like the
others, reach vLLM's real scheduler (its connector loaded by ``KVConnectorFactory``, its Mamba
spec with checkpoint blocks), that the mirror's loads and checkpoint writes keep slots exact under
vLLM's split, and that ``gdnfuzz coverage`` reports the split.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from conftest import seed_case

from fuzz.model.policies import resolve_policy
from fuzz.model.scenario import Scenario, ScenarioError, canonical_json, load_scenario
from fuzz.search.generate import random_scenario
from fuzz.search.mutate import MUTATIONS, mutate_scenario

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "regressions"
VLLM = resolve_policy("vllm")


def test_old_scenarios_keep_their_bytes_and_ids():
    raw = json.loads(seed_case().read_text())
    scenario, _ = load_scenario(seed_case())
    encoded = json.loads(canonical_json(scenario))
    assert "prefill_checkpoint_alignment" not in encoded["engine"]
    assert "shared_prefix_checkpoint" not in encoded["engine"]
    assert encoded["engine"] == {**raw["engine"], **encoded["engine"]}  # nothing added beside the defaults
    changed = scenario.with_engine(prefill_checkpoint_alignment=1, shared_prefix_checkpoint=True)
    assert changed.scenario_id() != scenario.scenario_id()
    assert Scenario.from_dict(changed.to_dict()) == changed


@pytest.mark.parametrize(("knob", "value"), [("prefill_checkpoint_alignment", 0),
                                              ("prefill_checkpoint_alignment", 4096),
                                              ("shared_prefix_checkpoint", 1)])
def test_new_knobs_are_validated(knob, value):
    data = json.loads(seed_case().read_text())
    data["engine"][knob] = value
    with pytest.raises(ScenarioError, match=f"engine.{knob}"):
        Scenario.from_dict(data)


def test_generation_and_mutation_reach_every_new_knob():
    rng = random.Random(11)
    scenarios = [random_scenario(rng) for _ in range(300)]
    assert any(s.engine.prefill_checkpoint_alignment for s in scenarios)
    assert any(s.engine.shared_prefix_checkpoint for s in scenarios)
    assert any(r.external_tokens for s in scenarios for r in s.requests)
    assert {"knob-prefill_checkpoint_alignment", "knob-shared_prefix_checkpoint", "external_prefix"} <= set(MUTATIONS)
    for s in scenarios[:50]:
        mutated = mutate_scenario(s, rng)
        assert Scenario.from_dict(mutated.to_dict()) == mutated


def test_connector_is_vllms_own_interface_and_its_load_is_exact(sim):
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, SupportsHMA

    from workers.sim.scheduler import build_scheduler

    scenario, _ = load_scenario(CORPUS / "connector-external-load-midblock.json")
    scheduler = build_scheduler(scenario.engine, 4096, kv_connector=True)
    assert isinstance(scheduler.connector, KVConnectorBase_V1) and isinstance(scheduler.connector, SupportsHMA)
    run = sim.run(scenario, VLLM)
    a = run.requests["a"]
    assert (a.hit_tokens, a.resume_state_ok) == (400, True)  # the external load, rounded to 16, exact
    assert not run.poisoned and not run.faults


def test_checkpoint_spec_reaches_the_scheduler():
    from workers.sim.scheduler import build_scheduler

    scenario, _ = load_scenario(seed_case())
    scheduler = build_scheduler(scenario.with_engine(prefill_checkpoint_alignment=1).engine, 4096)
    assert scheduler.mamba_has_prefill_checkpoint_blocks
    assert scheduler.mamba_prefill_checkpoint_alignment == 1


def test_coverage_reports_the_split(sim):
    pytest.importorskip("coverage")
    from fuzz.triage.coverage import measure

    report = measure([CORPUS / "connector-external-load-midblock.json"], VLLM)
    split = next(f for f in report.functions if f.name == "Scheduler._mamba_block_aligned_split")
    assert report.scenarios == 1 and 0 < split.covered_lines <= split.num_lines
    assert any(f.name.startswith("MambaManager.") for f in report.functions)
