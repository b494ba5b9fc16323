"""The knob table: every row is parsed, generated, mutated, shrunk and handed to vLLM from its row alone."""

from __future__ import annotations

import json
import random
from dataclasses import fields

import pytest
from conftest import seed_case

from fuzz.model.knobs import DEFAULTS, KNOBS, EngineKnobs, engine_args, scheduler_settings
from fuzz.model.scenario import Scenario, ScenarioError
from fuzz.reduce.minimize import minimize
from fuzz.search.generate import random_scenario
from fuzz.search.mutate import MUTATIONS

SEED = json.loads(seed_case().read_text())
GENERATED = [random_scenario(random.Random(i)) for i in range(400)]


def _with(engine: dict) -> dict:
    return {**SEED, "engine": {**SEED["engine"], **engine}}


def test_every_field_is_a_row_and_every_row_a_field():
    assert [f.name for f in fields(EngineKnobs)] == list(KNOBS) == list(DEFAULTS)


@pytest.mark.parametrize("name", [n for n, row in KNOBS.items() if row.kind in ("int", "ints")])
def test_a_number_out_of_its_range_names_its_field(name):
    row = KNOBS[name]
    bad = [row.hi + 1 if isinstance(row.hi, int) else 1 << 40] if row.kind == "ints" else \
        (row.hi + 1 if isinstance(row.hi, int) else 1 << 40)
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict(_with({name: bad}))
    assert err.value.field_path == f"engine.{name}"


@pytest.mark.parametrize("name", list(KNOBS))
def test_a_value_of_the_wrong_type_names_its_field(name):
    with pytest.raises(ScenarioError) as err:
        Scenario.from_dict(_with({name: "many"}))
    assert err.value.field_path == f"engine.{name}"


def test_rules_between_knobs_name_the_knob_at_fault():
    cases = [({"mamba_block_size": 60, "block_size": 16}, "engine.mamba_block_size"),
             ({"mamba_block_size": 64, "block_size": 16, "hash_block_size": 48}, "engine.hash_block_size"),
             ({"spec_decode": "off", "num_speculative_tokens": 2}, "engine.num_speculative_tokens"),
             ({"spec_decode": "mtp", "num_speculative_tokens": 0}, "engine.num_speculative_tokens"),
             ({"spec_decode": "off", "num_speculative_tokens": 0, "disable_lookahead_block_hashes": True},
              "engine.disable_lookahead_block_hashes")]
    for engine, field_path in cases:
        with pytest.raises(ScenarioError) as err:
            Scenario.from_dict(_with(engine))
        assert err.value.field_path == field_path, engine


def test_knobs_left_out_at_their_default_keep_old_files_byte_for_byte():
    scenario = Scenario.from_dict(SEED)
    encoded = scenario.to_dict()["engine"]
    for name, row in KNOBS.items():
        assert (name in encoded) != row.omit_at_default, name


def test_generation_and_mutation_reach_every_knob_they_declare():
    for name, row in KNOBS.items():
        if not row.available:  # a knob the installed vLLM lacks is neither drawn nor mutated
            assert all(s.engine.at_default(name) for s in GENERATED) and f"knob-{name}" not in MUTATIONS, name
            continue
        if row.generate is not None:
            assert len({getattr(s.engine, name) for s in GENERATED}) > 1, name
        if row.mutate is not None:
            mutation = MUTATIONS[f"knob-{name}"]
            rng = random.Random(3)
            outputs = {getattr(mutation(s, rng).engine, name) for s in GENERATED[:200]}
            assert len(outputs) > 1, name


def test_every_shrinkable_knob_returns_to_its_default_when_nothing_depends_on_it():
    start = random_scenario(random.Random(1)).with_engine(
        mamba_block_size=256, block_size=256, hash_block_size=16, spec_decode="eagle", num_speculative_tokens=3,
        step_budgets=(100, 200), max_num_batched_tokens=700, long_prefill_token_threshold=300, max_num_seqs=2,
        retention_interval=None, prefill_checkpoint_alignment=16, shared_prefix_checkpoint=True,
        num_kv_blocks=4000, disable_lookahead_block_hashes=True, prefill_schedule_interval=3)
    shrunk = minimize(start, lambda s: True, max_seconds=60).minimized.engine
    for name, row in KNOBS.items():
        if not row.shrink.fixed:
            assert shrunk.at_default(name), (name, getattr(shrunk, name))


def test_vllm_is_given_only_arguments_it_has():
    from vllm.config import SchedulerConfig
    from vllm.engine.arg_utils import EngineArgs

    engine_fields = {f.name for f in fields(EngineArgs)}
    for s in GENERATED[:100]:
        assert set(engine_args(s.engine, ("engine", "pool"))) <= engine_fields
        assert set(scheduler_settings(s.engine)) <= {f.name for f in fields(SchedulerConfig)}
    eagle = EngineKnobs(spec_decode="eagle", num_speculative_tokens=2)
    assert engine_args(eagle)["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 2}
    assert "prefill_schedule_interval" not in scheduler_settings(eagle)  # a knob some vLLMs lack, at its default


def test_a_knob_the_installed_vllm_lacks_makes_a_run_unsupported_with_the_reason():
    from fuzz.model.knobs import unsupported_reason

    for name, row in KNOBS.items():
        if row.needs is None:
            continue
        knobs = EngineKnobs(spec_decode="mtp", num_speculative_tokens=2, **{name: not DEFAULTS[name]
                            if row.kind == "bool" else 2})
        reason = unsupported_reason(knobs)
        assert (reason is None) == row.available, name
        if reason is not None:
            assert reason.startswith(f"engine.{name} needs ") and row.needs.since in reason


def test_what_a_knob_needs_of_vllm_is_read_without_importing_vllm():
    """The knob rows' probes run when the mutations are registered (every command imports them): reading
    vLLM's source, not importing it, keeps vLLM's import-time log lines off every command's stderr and a
    mistyped policy's error instant."""
    import subprocess
    import sys

    probe = ("import sys; import fuzz.cli, fuzz.search.mutate; "
             "print(sorted(n for n, r in __import__('fuzz.model.knobs', fromlist=['KNOBS']).KNOBS.items() "
             "if not r.available), 'vllm' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip().endswith("False") and done.stderr == ""
