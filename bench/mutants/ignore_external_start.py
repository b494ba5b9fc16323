"""Correctness mutant: vLLM's split, but its start leaves out the tokens a KV connector loads.

``start`` is where the chunk begins; for a fresh admission it is the local hit plus
``num_external_computed_tokens``. Leaving the external tokens out makes the split align a chunk
that really starts at ``local + external`` as if it started at ``local``: after an external load
that ends mid-block, the chunk runs past the next block boundary and freezes that block's slot
with a mid-block state which the prefix cache then serves. Reached only with ``external_tokens``.
Used as ``bench/mutants/ignore_external_start.py:split``.
"""

from typing import Any


def split(self: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
          num_external_computed_tokens: int = 0) -> int:
    from vllm.v1.core.sched.scheduler import Scheduler

    return Scheduler.__dict__["_mamba_block_aligned_split"](self, request, num_new_tokens,
                                                             num_new_local_computed_tokens, 0)
