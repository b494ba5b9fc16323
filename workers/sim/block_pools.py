"""Recycled ``BlockPool``s: a drained pool reset to exactly the state ``BlockPool.__init__`` leaves.

Invariants: a pool ``BlockPoolStock.take`` returns is indistinguishable from a new ``BlockPool(...)`` (fields, free
queue order, empty hash index, no events or watchers); only blocks a run touched are reset (none above ``_Front``'s
highest id was allocated); pools are taken back only drained, without metrics or KV events; recycling is off if
``BlockPool``/``KVCacheBlock`` gain unknown fields; only ``recycled_block_pools`` routes the coordinator's call."""

from __future__ import annotations

import dataclasses
import inspect
import weakref
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
    """Idle drained pools by construction arguments but the block count (at most ``size`` pools kept,
    the least recently given back dropped first)."""

    def __init__(self, size: int = 32):
        from vllm.v1.core.block_pool import BlockPool
        from vllm.v1.core.kv_cache_utils import KVCacheBlock

        self.size = size
        self._signature = inspect.signature(BlockPool)
        self._idle: OrderedDict[int, tuple[tuple[Any, ...], Any, int]] = OrderedDict()  # id -> (key, pool, touched)
        self._fronts: weakref.WeakKeyDictionary[Any, _Front] = weakref.WeakKeyDictionary()  # pools handed out
        self.enabled = {f.name for f in dataclasses.fields(KVCacheBlock)} == BLOCK_FIELDS and set(
            vars(BlockPool(1, True, 1))) == POOL_FIELDS
        self.reused = self.built = 0

    def take(self, *args: Any, **kwargs: Any) -> Any:
        """``BlockPool(*args, **kwargs)``: the smallest idle pool with these args and enough blocks, cut and reset."""
        from vllm.v1.core.block_pool import BlockPool

        key, num_blocks = self._key(args, kwargs)
        fitting = [(len(p.blocks), i) for i, (k, p, _) in self._idle.items() if k == key and len(p.blocks) >= num_blocks]
        if key is None or not fitting:
            self.built += 1
            pool = BlockPool(*args, **kwargs)
        else:
            _, pool, touched = self._idle.pop(min(fitting)[1])
            self.reused += 1
            _reset(pool, num_blocks, min(touched, num_blocks))
        if key is not None:
            self._fronts[pool] = _Front(pool.free_block_queue)
        return pool

    def give_back(self, pool: Any) -> None:
        """Keep ``pool`` for a later ``take`` if it is drained (no block in use, nothing pending)."""
        key, _ = self._key((), {name: getattr(pool, name) for name in self._signature.parameters})
        drained = (pool.get_num_free_blocks() == pool.num_gpu_blocks - 1 and not pool._reuse_watchers
                   and not pool.kv_event_queue)
        front = self._fronts.pop(pool, None)
        if key is None or not drained or front is None or front.queue is not pool.free_block_queue:
            return
        self._idle[id(pool)] = (key, pool, front.highest + 1)
        while len(self._idle) > self.size:
            self._idle.popitem(last=False)

    def _key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...] | None, int]:
        """The construction arguments but ``num_gpu_blocks`` (None for a pool never recycled), and that count."""
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        num_blocks = arguments.pop("num_gpu_blocks")
        if not self.enabled or arguments["metrics_collector"] is not None or arguments["enable_kv_cache_events"]:
            return None, num_blocks
        return tuple(sorted(arguments.items())), num_blocks


class _Front:
    """The highest block id ``queue`` (a ``FreeKVCacheBlockQueue``) has handed out from its front since
    it was made: its ``popleft`` and ``popleft_n`` are observed on this instance, results unchanged."""

    def __init__(self, queue: Any):
        self.queue = queue
        self.highest = 0  # the null block, popped when the pool was made or reset
        popleft, popleft_n = queue.popleft, queue.popleft_n

        def observed_popleft() -> Any:
            block = popleft()
            self.highest = max(self.highest, block.block_id)
            return block

        def observed_popleft_n(n: int) -> list[Any]:
            blocks = popleft_n(n)
            if blocks:
                self.highest = max(self.highest, max(b.block_id for b in blocks))
            return blocks

        queue.popleft, queue.popleft_n = observed_popleft, observed_popleft_n


def _reset(pool: Any, num_blocks: int, touched: int) -> None:
    """Reset ``pool`` and its first ``num_blocks`` blocks as ``BlockPool.__init__`` sets them (POOL_FIELDS), given
    blocks ``touched`` and above were never allocated; touched blocks are relinked in id order before the rest."""
    from vllm.v1.core.block_pool import BlockHashToBlockMap
    from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue

    blocks = pool.blocks
    del blocks[num_blocks:]
    pool.num_gpu_blocks = num_blocks
    queue = FreeKVCacheBlockQueue([])  # its fake head and tail, linked to each other
    previous = queue.fake_free_list_head
    for block in blocks[:touched]:
        block.ref_cnt = 0
        block._block_hash = None
        block._block_hash_num_tokens = None
        block.is_null = False
        block.prev_free_block = previous
        previous.next_free_block = block
        previous = block
    if touched < num_blocks:  # the untouched run, still linked in id order: its two ends reattached
        blocks[touched].prev_free_block = previous
        previous.next_free_block = blocks[touched]
        previous = blocks[-1]
    previous.next_free_block = queue.fake_free_list_tail
    queue.fake_free_list_tail.prev_free_block = previous
    queue.num_free_blocks = num_blocks
    pool.free_block_queue = queue
    pool.cached_block_hash_to_block = BlockHashToBlockMap()
    pool.cached_block_hashes_by_block = {}
    pool.null_block = queue.popleft()
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
