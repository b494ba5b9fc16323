"""vLLM's request block hasher (what ``EngineCore`` hands every ``Request``), memoized across runs.

Invariant: it returns exactly the list vLLM's ``request_block_hasher`` returns, in order: a memo entry is keyed by
the hash function, hash block size, ``NONE_HASH``, parent hash and the tokens' exact bytes (unsigned 32-bit ids);
a request with any extra key (multimodal, LoRA, cache salt, embeddings) goes to vLLM's hasher every time."""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

MEMO_ENTRIES = 1024  # a key holds its tokens at 4 bytes each: tens of MB at most for this many
_MEMO: OrderedDict[tuple[Any, ...], tuple[Any, ...]] = OrderedDict()


def vllm_block_hasher(hash_block_size: int, algorithm: str) -> Callable[[Any], list[Any]]:
    """vLLM's own hasher, built as EngineCore builds it (``NONE_HASH`` initialised for ``algorithm``)."""
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    hash_fn = get_hash_fn_by_name(algorithm)
    init_none_hash(hash_fn)
    return get_request_block_hasher(hash_block_size, hash_fn)


def memoized_block_hasher(hash_block_size: int, algorithm: str) -> Callable[[Any], list[Any]]:
    """``vllm_block_hasher(hash_block_size, algorithm)``, with its results kept for requests without extra keys."""
    from vllm.v1.core import kv_cache_utils

    hash_request = vllm_block_hasher(hash_block_size, algorithm)
    scope = (algorithm, hash_block_size, kv_cache_utils.NONE_HASH)

    def hasher(request: Any) -> list[Any]:
        if request.mm_features or request.lora_request or request.cache_salt or request.prompt_embeds is not None:
            return hash_request(request)
        start = len(request.block_hashes) * hash_block_size
        end = request.num_tokens // hash_block_size * hash_block_size
        if end <= start:
            return []  # no new full block: vLLM's early return
        parent = request.block_hashes[-1] if request.block_hashes else None
        key = (scope, parent, array("I", request.all_token_ids[start:end]).tobytes())
        hashes = _MEMO.get(key)
        if hashes is None:
            hashes = _MEMO[key] = tuple(hash_request(request))
            if len(_MEMO) > MEMO_ENTRIES:
                _MEMO.popitem(last=False)
        else:
            _MEMO.move_to_end(key)
        return list(hashes)

    return hasher
