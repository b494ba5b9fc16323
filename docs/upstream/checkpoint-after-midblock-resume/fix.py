"""The proposed fix, as a candidate split: vLLM 0.32's own ``Scheduler._mamba_block_aligned_split`` with the
internal prefill checkpoint used only for a chunk that starts on a Mamba block boundary.

The patch (``vllm/v1/core/sched/scheduler.py``, in ``_mamba_block_aligned_split``)::

         use_internal_checkpoint = (
             self.mamba_has_prefill_checkpoint_blocks
             and end >= prefill_end
    +        and start % block_size == 0
             and is_mamba_prefill_checkpoint_valid(

A chunk that starts mid-block (a resume after a partial-tail hit) then keeps the stop at the next block
boundary, so the block it started in holds the boundary state before ``allocate_slots`` hashes it.
Built from the installed source with that one condition added (compiled against the scheduler module's
own globals; nothing global is patched). Use it as a candidate:
``gdnfuzz replay corpus/regressions/*.json --candidate docs/upstream/checkpoint-after-midblock-resume/fix.py:split``.
"""

from __future__ import annotations

import inspect
import textwrap
from typing import Any

# at the indentation of the method's body once dedented
BEFORE = "        and end >= prefill_end\n"
AFTER = "        and end >= prefill_end\n        and start % block_size == 0\n"


def _fixed() -> Any:
    import vllm.v1.core.sched.scheduler as scheduler_module

    source = textwrap.dedent(inspect.getsource(scheduler_module.Scheduler._mamba_block_aligned_split))
    if source.count(BEFORE) != 1:
        raise ValueError("the installed split no longer has the one line this fix extends")
    source = source.replace(BEFORE, AFTER)
    namespace = dict(vars(scheduler_module))
    exec(compile(source, "<checkpoint-after-midblock-resume fix>", "exec"), namespace)
    return namespace["_mamba_block_aligned_split"]


split = _fixed()
