"""One-line mutants of the installed vLLM's own split: its source with exactly one condition changed.

Each mutant is ``Scheduler._mamba_block_aligned_split`` as the installed vLLM ships it, with one line
edited (``MUTATIONS``: the text replaced must occur exactly once, or building the mutant fails), compiled
against the scheduler module's own globals (nothing global is patched). Use one as a candidate:
``bench/mutants/one_line.py:<name>``, e.g. ``gdnfuzz run --candidate bench/mutants/one_line.py:replay_as_prompt``.
They measure how many signatures one bug becomes (issue 28) and how fast a class of bug is found.
"""

from __future__ import annotations

import inspect
import textwrap
from typing import Any

MUTATIONS = {
    # a resumed request re-prefilling its outputs is split as if only its prompt needed aligning
    "replay_as_prompt": ("prefill_end = max(request.num_prompt_tokens, request.num_tokens - 1)",
                         "prefill_end = request.num_prompt_tokens"),
    # last_cache_position of a resumed request computed from its prompt, not from all its tokens
    "lcp_from_prompt": ("\n        request.num_tokens,\n", "\n        request.num_prompt_tokens,\n"),
    # the mid-block stop taken only where the backend checkpoints internally (the condition inverted)
    "midblock_stop_inverted": ("if start % block_size != 0 and not use_internal_checkpoint",
                               "if start % block_size != 0 and use_internal_checkpoint"),
    # the internal checkpoint judged at the other block size
    "checkpoint_block_swapped": ("self.hash_block_size if self.mamba_partial_cache_hit else self.block_size",
                                 "self.block_size if self.mamba_partial_cache_hit else self.hash_block_size"),
    # the prompt checkpoint of partial hits placed as if EAGLE dropped no block
    "tail_without_eagle_drop": ("\n            self.use_eagle_block_drop,\n", "\n            False,\n"),
    # never defer: a chunk that cannot end aligned schedules one token
    "never_defer": ("return max(end - start, 0)", "return max(end - start, 1)"),
    # chunk ends rounded down only below last_cache_position (the gate before vLLM PR #51113)
    "gate_on_lcp": ("if end < prefill_end:", "if end < last_cache_position:"),
}


def build(name: str, old: str, new: str) -> Any:
    """The installed split with its one occurrence of ``old`` replaced by ``new``, compiled against the
    scheduler module's globals (a ValueError where ``old`` does not occur exactly once)."""
    import vllm.v1.core.sched.scheduler as scheduler_module

    source = textwrap.dedent(inspect.getsource(scheduler_module.Scheduler.__dict__["_mamba_block_aligned_split"]))
    if source.count(old) != 1:
        raise ValueError(f"mutant {name}: {old!r} occurs {source.count(old)} times in the installed split")
    namespace = dict(vars(scheduler_module))
    exec(compile(source.replace(old, new), f"<one_line mutant {name}>", "exec"), namespace)
    return namespace["_mamba_block_aligned_split"]


def __getattr__(name: str) -> Any:
    if name in MUTATIONS:
        return build(name, *MUTATIONS[name])
    raise AttributeError(name)
