"""What the sim reuses between runs behaves exactly as what vLLM would build fresh.

- A VllmConfig whose model-level configs are copied (``workers.sim.scheduler._ModelParts``) equals one
  built from scratch by ``EngineArgs`` field by field, and vLLM rejects the same knob sets with the
  same reason.
- A recycled block pool is, field by field and in free-queue order, a new ``BlockPool``.
- Every request's block hashes, computed through the memoized hasher (``workers.sim.block_hashes``),
  are what vLLM's own hasher computes for its tokens.
- The audit's view of the Mamba hash entries (``workers.sim.hash_index``) is, after every step, what a
  scan of the pool's whole hash index reads, in the same order.
- Whole runs on schedulers built with both (and with the incremental audit) are identical, every
  field of every ``RunResult``, to runs on schedulers built new each time.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

import workers.sim.scheduler as scheduler_module
from fuzz.errors import ConfigRejected
from fuzz.model.knobs import EngineKnobs
from fuzz.model.policies import resolve_policy
from fuzz.search.generate import random_scenario
from workers.sim.block_hashes import vllm_block_hasher
from workers.sim.block_pools import BlockPoolStock
from workers.sim.executor import MAMBA_GROUP, SimExecutor
from workers.sim.hash_index import scan
from workers.sim.scheduler import ConfigKey, vllm_config_for

PER_BUILD_IDS = ("instance_id", "engine_id")  # fresh per build in vLLM itself


def config_fields(config: Any, depth: int = 0) -> dict[str, str]:
    """Every field of a VllmConfig and of its sub-configs (two levels), as reprs."""
    out: dict[str, str] = {}
    for name, value in sorted(vars(config).items()):
        if depth < 2 and "config" in type(value).__name__.lower() and hasattr(value, "__dict__"):
            out.update({f"{name}.{k}": v for k, v in config_fields(value, depth + 1).items()})
        elif not name.endswith(PER_BUILD_IDS):
            out[name] = repr(value)
    return out


def built(key: ConfigKey) -> dict[str, str] | str:
    try:
        return config_fields(vllm_config_for(key))
    except ConfigRejected as exc:
        return str(exc)


def test_copied_model_configs_equal_fresh_builds_and_rejections():
    rng = random.Random(5)
    keys = {ConfigKey.of(random_scenario(rng).engine, connector) for connector in (False, True) for _ in range(12)}
    rejected = (EngineKnobs(mamba_block_size=64, spec_decode="mtp", num_speculative_tokens=2, retention_interval=-5),
                EngineKnobs(mamba_block_size=64, spec_decode="mtp", num_speculative_tokens=0, retention_interval=None),
                EngineKnobs(mamba_block_size=0, retention_interval=None))
    keys |= {ConfigKey.of(knobs) for knobs in rejected}  # three knob sets vLLM rejects
    vllm_config_for.cache_clear()
    derived = {key: built(key) for key in sorted(keys, key=repr)}  # model parts shared from the first build
    assert sum(isinstance(v, str) for v in derived.values()) == 3
    for key in derived:
        vllm_config_for.cache_clear()
        scheduler_module._MODEL_PARTS.clear()
        assert built(key) == derived[key], key


def pool_state(pool: Any) -> dict[str, Any]:
    """Everything a BlockPool holds, with blocks by id and the free queue as an id sequence."""
    queue, block = [], pool.free_block_queue.fake_free_list_head.next_free_block
    while block is not pool.free_block_queue.fake_free_list_tail:
        queue.append(block.block_id)
        block = block.next_free_block
    blocks = [(b.block_id, b.ref_cnt, b.pool is pool, b._block_hash, b._block_hash_num_tokens, b.is_null,
               b.prev_free_block.block_id if b.prev_free_block else None,
               b.next_free_block.block_id if b.next_free_block else None) for b in pool.blocks]
    return {"queue": queue, "blocks": blocks, "free": pool.get_num_free_blocks(),
            "index": dict(pool.cached_block_hash_to_block._cache), "by_block": pool.cached_block_hashes_by_block,
            "null": pool.null_block.block_id, "events": pool.kv_event_queue, "watchers": pool._reuse_watchers,
            "args": (pool.num_gpu_blocks, pool.enable_caching, pool.hash_block_size, pool.enable_kv_cache_events,
                     pool.metrics_collector, pool.medium)}


def test_a_recycled_pool_is_a_new_pool(sim):
    from vllm.v1.core.block_pool import BlockPool

    stock = BlockPoolStock()
    assert stock.enabled
    scenario = random_scenario(random.Random(2))
    executor = SimExecutor()
    real_stock = scheduler_module._pool_stock
    scheduler_module._pool_stock = lambda: stock
    try:
        executor.run(scenario, resolve_policy("naive"))  # leaves hashes, freed blocks out of order
        assert stock.built == 1 and len(stock._idle) == 1
        ((_, used, touched),) = stock._idle.values()
        assert 1 < touched < used.num_gpu_blocks  # only the blocks the run allocated are reset
        assert pool_state(used)["queue"] != sorted(pool_state(used)["queue"])
        recycled = stock.take(used.num_gpu_blocks, True, used.hash_block_size)
        assert recycled is used and stock.reused == 1
        assert pool_state(recycled) == pool_state(BlockPool(used.num_gpu_blocks, True, used.hash_block_size))
        executor.run(scenario, resolve_policy("naive"))  # builds a second pool (the first is held here)
        ((_, second, _),) = stock._idle.values()
        smaller = second.num_gpu_blocks // 3
        cut = stock.take(smaller, True, second.hash_block_size)  # the same pool, its first blocks only
    finally:
        scheduler_module._pool_stock = real_stock
    assert cut is second and stock.reused == 2
    assert pool_state(cut) == pool_state(BlockPool(smaller, True, second.hash_block_size))



def test_a_pool_still_in_use_is_not_taken_back():
    stock = BlockPoolStock()
    pool = stock.take(64, True, 16)
    pool.get_new_blocks(3)
    stock.give_back(pool)
    assert not stock._idle


def test_a_pool_serves_only_its_own_arguments_and_no_larger_count():
    from vllm.v1.core.block_pool import BlockPool

    stock = BlockPoolStock()
    pool = stock.take(64, True, 16)
    stock.give_back(pool)
    assert stock.take(65, True, 16) is not pool and stock.take(64, True, 32) is not pool
    assert stock.take(64, True, 16) is pool and stock.built == 3
    stock.give_back(BlockPool(64, True, 16))  # not handed out by this stock: what it touched is unknown
    assert not stock._idle


class NeverKept(dict):
    """A model-parts table that keeps nothing: every VllmConfig is built whole by EngineArgs."""

    def get(self, key: Any, default: Any = None) -> Any:
        return default

    def setdefault(self, key: Any, default: Any = None) -> Any:
        return default


@pytest.mark.parametrize("policy", ["vllm", "naive", "pre-51113"])
def test_runs_on_reused_parts_equal_runs_on_fresh_schedulers(sim, policy, monkeypatch):
    """60 generated scenarios: every field of every result, reused (pools, configs) against fresh."""
    rng = random.Random(23)
    scenarios = [random_scenario(rng) for _ in range(60)]

    def results() -> list[str]:
        executor = SimExecutor()
        return [json.dumps(executor.run(s, resolve_policy(policy)).to_dict(), sort_keys=True, default=str)
                for s in scenarios]

    reused = results()
    assert scheduler_module._pool_stock().reused > 0
    fresh_stock = BlockPoolStock()
    fresh_stock.enabled = False  # every take builds a new BlockPool
    monkeypatch.setattr(scheduler_module, "_pool_stock", lambda: fresh_stock)
    vllm_config_for.cache_clear()
    monkeypatch.setattr(scheduler_module, "_MODEL_PARTS", NeverKept())
    monkeypatch.setattr(scheduler_module, "vllm_config_for", scheduler_module.vllm_config_for.__wrapped__)
    assert results() == reused
    assert fresh_stock.reused == 0 and fresh_stock.built == len(scenarios)


def test_the_watched_mamba_entries_are_a_full_scan_after_every_step(sim, monkeypatch):
    """Generated scenarios (preemption, eviction, several hashes per block) under two policies."""
    audit = SimExecutor._audit
    seen = {"steps": 0, "shrank": 0}

    def checked(self: SimExecutor, run: Any, step: int) -> None:
        watched = list(run.hash_index.current().items())
        assert watched == list(scan(run.scheduler.kv_cache_manager.block_pool.cached_block_hash_to_block,
                                    MAMBA_GROUP).items())
        seen["shrank"] += len(watched) < seen.get(id(run), 0)
        seen[id(run)] = len(watched)
        seen["steps"] += 1
        audit(self, run, step)

    monkeypatch.setattr(SimExecutor, "_audit", checked)
    rng = random.Random(31)
    executor = SimExecutor()
    for policy in ("vllm", "naive"):
        for scenario in [random_scenario(rng) for _ in range(40)]:
            executor.run(scenario, resolve_policy(policy))
    assert seen["steps"] > 1000 and seen["shrank"] > 0  # entries were evicted, not only added


def test_memoized_block_hashes_are_vllms(sim, monkeypatch):
    """Each finished request's hashes against vLLM's hasher over its prompt and outputs, from scratch."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    collect = SimExecutor._collect
    compared: list[int] = []

    def checked(run: Any) -> None:
        collect(run)
        scheduler = run.scheduler
        fresh = vllm_block_hasher(scheduler.hash_block_size, scheduler.cache_config.prefix_caching_hash_algo)
        for rid, request in run.vllm_requests.items():
            rebuilt = Request(rid, list(request.all_token_ids), SamplingParams(max_tokens=1), None,
                              block_hasher=fresh)
            assert request.block_hashes == rebuilt.block_hashes
            compared.append(len(request.block_hashes))

    monkeypatch.setattr(SimExecutor, "_collect", staticmethod(checked))
    rng = random.Random(37)
    executor = SimExecutor()
    scenarios = [random_scenario(rng) for _ in range(30)]
    for scenario in scenarios + scenarios:  # the second pass is served from the memo
        executor.run(scenario, resolve_policy("vllm"))
    assert len(compared) > 100 and sum(compared) > 5000
