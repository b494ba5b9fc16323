"""Correctness mutant: vLLM's split, believing the backend checkpoints inside every final chunk.

For a Mamba spec with prefill checkpoint blocks (Mamba2, KDA), vLLM's split asks
``is_mamba_prefill_checkpoint_valid`` whether the backend will export the prompt checkpoint
inside the final chunk, and only then drops its mid-block and prompt-checkpoint stops. This
mutant answers yes for every final chunk: the scheduler stops declining in lockstep with
``MambaManager`` and ``compute_mamba_prefill_checkpoints``, so a final chunk that starts mid-block
runs past the boundary with no checkpoint written there. Reached only with
``prefill_checkpoint_alignment``. Built once: vLLM's own split code over the scheduler module's
globals, with that one helper replaced (nothing global is patched).
Used as ``bench/mutants/checkpoint_every_final_chunk.py:split``.
"""

import types
from typing import Any


def _always_valid(**_: Any) -> bool:
    return True


def _build() -> Any:
    import vllm.v1.core.sched.scheduler as scheduler_module

    original = scheduler_module.Scheduler.__dict__["_mamba_block_aligned_split"]
    namespace = {**scheduler_module.__dict__, "is_mamba_prefill_checkpoint_valid": _always_valid}
    return types.FunctionType(original.__code__, namespace, original.__name__, original.__defaults__)


split = _build()
