"""Mutant: vLLM's split, except for a request preempted at least twice, whose cut chunks keep the budget.

A deep-state bug: the wrong branch needs a KV pool tight enough that the same request is preempted
twice and then resumes with a chunk vLLM would cut back to a block boundary. Only then does this
split return the budget's end (mid-block), so the resumed request's next Mamba slot is hashed as a
block boundary while it holds a state short of it. Random scenarios rarely line that up; vLLM's own
preemption branches, which the fuzzer's coverage sees, lead there. Used as
``bench/mutants/misalign_after_preemption.py:split``.
"""

from typing import Any


def split(self: Any, request: Any, num_new_tokens: int, num_new_local_computed_tokens: int = 0,
          num_external_computed_tokens: int = 0) -> int:
    from vllm.v1.core.sched.scheduler import Scheduler

    aligned = Scheduler.__dict__["_mamba_block_aligned_split"](
        self, request, num_new_tokens, num_new_local_computed_tokens, num_external_computed_tokens)
    if request.num_preemptions >= 1 and 0 < aligned < num_new_tokens:
        return num_new_tokens
    return aligned
