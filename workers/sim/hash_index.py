"""The Mamba group's entries of a block pool's hash index, kept current without scanning the index.

``MambaHashIndex`` observes the index's only mutators (``insert``, ``pop``) on that instance. Invariants:
``current()`` equals ``scan(index, group)`` now (same keys, blocks and order; a popped key put back moves last);
observing changes nothing vLLM sees; a pool that replaces its index (``reset_prefix_cache``) is re-read by a scan."""

from __future__ import annotations

from typing import Any

Entries = dict[Any, tuple[Any, ...]]  # hash key -> the blocks registered under it, in the index's order


def blocks_of(entry: Any) -> tuple[Any, ...]:
    """The blocks of one index entry (a single ``KVCacheBlock``, or a dict of them by block id)."""
    return tuple(entry.values()) if isinstance(entry, dict) else (entry,)


def scan(index: Any, group: int) -> Entries:
    """Every entry of ``group`` in ``index`` (a ``BlockHashToBlockMap``), read in full."""
    from vllm.v1.core.kv_cache_utils import get_group_id

    return {key: blocks_of(entry) for key, entry in index._cache.items() if get_group_id(key) == group}


class MambaHashIndex:
    """One group's entries of ``pool.cached_block_hash_to_block``, as ``scan`` would read them."""

    def __init__(self, pool: Any, group: int):
        self._pool = pool
        self._group = group
        self._groups: dict[Any, int] = {}  # hash key -> its group (parsed once per key)
        self._attach(pool.cached_block_hash_to_block)

    def current(self) -> Entries:
        index = self._pool.cached_block_hash_to_block
        if index is not self._index:
            self._attach(index)
        return self._entries

    def _attach(self, index: Any) -> None:
        self._index = index
        self._entries = scan(index, self._group)
        insert, pop = index.insert, index.pop

        def observed_insert(key: Any, block: Any) -> None:
            insert(key, block)
            if self._is_mine(key):
                self._reread(key, moved=False)

        def observed_pop(key: Any, block_id: int) -> Any:
            popped = pop(key, block_id)
            if self._is_mine(key):
                self._reread(key, moved=True)
            return popped

        index.insert, index.pop = observed_insert, observed_pop

    def _is_mine(self, key: Any) -> bool:
        """Whether ``key`` belongs to this group (each key's group parsed once)."""
        group = self._groups.get(key)
        if group is None:
            from vllm.v1.core.kv_cache_utils import get_group_id

            group = self._groups[key] = get_group_id(key)
        return group == self._group

    def _reread(self, key: Any, moved: bool) -> None:
        """``key``'s entry as the index holds it now (a popped key's entry, if any is left, moved last)."""
        entry = self._index._cache.get(key)
        if entry is None or moved:
            self._entries.pop(key, None)
        if entry is not None:
            self._entries[key] = blocks_of(entry)
