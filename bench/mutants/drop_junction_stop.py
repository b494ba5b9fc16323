"""Mutant: vLLM's split without the shared-prefix junction stop.

With ``enable_mamba_shared_prefix_checkpoint`` (partial hash hits, an EAGLE-family drafter), a
request whose attention hit runs past its Mamba hit has a ``shared_prefix_boundary``: the
junction where a sibling diverged. vLLM ends a chunk there so ``MambaManager`` can cache the
junction's state for the next sibling. This mutant never stops there (it hides the junction from
the split for the duration of the call), so the junction is never checkpointed and later
siblings resume from an earlier state. Reached only with ``shared_prefix_checkpoint``.
Used as ``bench/mutants/drop_junction_stop.py:split``.
"""

from typing import Any


def split(self: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
          num_external_computed_tokens: int = 0) -> int:
    from vllm.v1.core.sched.scheduler import Scheduler

    junction = request.shared_prefix_boundary
    request.shared_prefix_boundary = 0
    try:
        return Scheduler.__dict__["_mamba_block_aligned_split"](
            self, request, num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)
    finally:
        request.shared_prefix_boundary = junction
