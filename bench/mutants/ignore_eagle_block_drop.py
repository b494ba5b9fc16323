"""Efficiency mutant: vLLM's split as if EAGLE/MTP did not drop the last matching block.

With the drop, full attention cannot verify the last block a draft model could touch, so vLLM stops
caching one block earlier; a split that forgets this keeps every slot exact (it only stops at
boundaries) but stops where no later request can hit. Used by bench/time_to_find.py and the
efficiency-oracle tests as ``bench/mutants/ignore_eagle_block_drop.py:split``.
"""

from typing import Any


def split(self: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
          num_external_computed_tokens: int = 0) -> int:
    from vllm.v1.core.sched.scheduler import Scheduler

    drop, self.use_eagle_block_drop = self.use_eagle_block_drop, False
    try:
        return Scheduler.__dict__["_mamba_block_aligned_split"](
            self, request, num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)
    finally:
        self.use_eagle_block_drop = drop
