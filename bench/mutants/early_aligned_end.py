"""Efficiency mutant: vLLM's split, but a chunk that ends on a block boundary before the prompt's end
stops EARLY tokens short of it.

The next chunk then starts mid-block, and vLLM's split stops it at that boundary, so every hashed
slot still holds exactly its state: the cost is one more chunk (and forward pass) per aligned stop.
Used as ``bench/mutants/early_aligned_end.py:split``.
"""

from typing import Any

EARLY = 8


def split(self: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
          num_external_computed_tokens: int = 0) -> int:
    from vllm.v1.core.sched.scheduler import Scheduler

    n = Scheduler.__dict__["_mamba_block_aligned_split"](
        self, request, num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)
    start = request.num_computed_tokens + num_new_local_computed_tokens + num_external_computed_tokens
    end = start + n
    aligned = end % self.cache_config.block_size == 0
    return n - EARLY if aligned and n > EARLY and end < request.num_prompt_tokens else n
