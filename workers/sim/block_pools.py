"""Recycled ``BlockPool``s: a drained pool reset to exactly the state ``BlockPool.__init__`` leaves.

Building a Scheduler is mostly building its pool's ``KVCacheBlock`` objects (one per block, a
dataclass ``__init__`` each: 2 ms of a 4 ms build for 1500 blocks). A sim run ends with every
request finished, so its pool is drained: every block but the null block is free. Resetting such a
pool costs a fraction of a new one, and the rest of the Scheduler is still built new by vLLM.

Invariants kept here:
- a pool ``BlockPoolStock.take`` returns is indistinguishable from ``BlockPool(...)`` with the same
  arguments: every block's fields, the free queue's order (block id order, block 0 the null block),
  an empty hash index, no events and no reuse watchers (``tests/test_sim_reuse.py`` compares
  them field by field with a new pool, and whole runs against runs on new schedulers);
- a pool is taken back only drained, with nothing pending, and only when built without a metrics
  collector or KV events; anything else is left to the garbage collector;
- recycling is off (every ``take`` builds a new pool) if ``BlockPool`` or ``KVCacheBlock`` carry
  fields this reset does not know: a vLLM upgrade is never half-reset;
- only the coordinator's one ``BlockPool(...)`` call is routed here, and only inside
  ``recycled_block_pools`` (around one Scheduler construction).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

POOL_FIELDS = frozenset({
    "num_gpu_blocks", "medium", "enable_caching", "hash_block_size", "blocks", "free_block_queue",
    "cached_block_hash_to_block", "cached_block_hashes_by_block", "null_block", "enable_kv_cache_events",
    "kv_event_queue", "metrics_collector", "_reuse_watchers",
})
BLOCK_FIELDS = frozenset({
    "block_id", "ref_cnt", "pool", "_block_hash", "_block_hash_num_tokens", "prev_free_block",
    "next_free_block", "is_null",
})


class BlockPoolStock:
    """Idle drained pools by construction arguments (least recently used dropped beyond ``size``)."""

    def __init__(self, size: int = 32):
        from vllm.v1.core.block_pool import BlockPool
        from vllm.v1.core.kv_cache_utils import KVCacheBlock

        self.size = size
        self._signature = inspect.signature(BlockPool)
        self._idle: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self.enabled = {f.name for f in dataclasses.fields(KVCacheBlock)} == BLOCK_FIELDS and set(
            vars(BlockPool(1, True, 1))) == POOL_FIELDS
        self.reused = self.built = 0

    def take(self, *args: Any, **kwargs: Any) -> Any:
        """``BlockPool(*args, **kwargs)``: a recycled pool when one with these arguments is idle."""
        from vllm.v1.core.block_pool import BlockPool

        key = self._key(args, kwargs)
        pool = self._idle.pop(key, None) if key is not None else None
        if pool is None:
            self.built += 1
            return BlockPool(*args, **kwargs)
        self.reused += 1
        _reset(pool)
        return pool

    def give_back(self, pool: Any) -> None:
        """Keep ``pool`` for a later ``take`` if it is drained (no block in use, nothing pending)."""
        key = self._key((), {name: getattr(pool, name) for name in self._signature.parameters})
        drained = (pool.get_num_free_blocks() == pool.num_gpu_blocks - 1 and not pool._reuse_watchers
                   and not pool.kv_event_queue)
        if key is None or not drained:
            return
        self._idle[key] = pool
        self._idle.move_to_end(key)
        while len(self._idle) > self.size:
            self._idle.popitem(last=False)

    def _key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
        """The construction arguments, or None for a pool that is never recycled."""
        if not self.enabled:
            return None
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        if bound.arguments["metrics_collector"] is not None or bound.arguments["enable_kv_cache_events"]:
            return None
        return tuple(sorted(bound.arguments.items()))


def _reset(pool: Any) -> None:
    """Every field of ``pool`` and its blocks as ``BlockPool.__init__`` sets them (see POOL_FIELDS)."""
    from vllm.v1.core.block_pool import BlockHashToBlockMap
    from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue

    for block in pool.blocks:
        block.ref_cnt = 0
        block._block_hash = None
        block._block_hash_num_tokens = None
        block.is_null = False
    pool.free_block_queue = FreeKVCacheBlockQueue(pool.blocks)  # relinks every block in id order
    pool.cached_block_hash_to_block = BlockHashToBlockMap()
    pool.cached_block_hashes_by_block = {}
    pool.null_block = pool.free_block_queue.popleft()
    pool.null_block.is_null = True
    pool.kv_event_queue = []
    pool._reuse_watchers = {}


@contextmanager
def recycled_block_pools(stock: BlockPoolStock) -> Iterator[None]:
    """Within this block, the KV cache coordinator's ``BlockPool(...)`` is ``stock.take(...)``."""
    import vllm.v1.core.kv_cache_coordinator as coordinator

    real = coordinator.BlockPool
    coordinator.BlockPool = stock.take
    try:
        yield
    finally:
        coordinator.BlockPool = real
